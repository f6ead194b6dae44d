"""The LSP's settings: what the editor may configure, with defaults and checks.

Settings arrive as a JSON object in ``initializationOptions`` and in
``workspace/didChangeConfiguration`` (either flat or under an ``"ngramd"`` key), with
LSP-style camelCase names:

    maxTokens    int    1..1024   tokens a completion may have             (64)
    multiline    bool             allow completions past the current line  (true)
    temperature  float  0, or 1e-4..100 (the daemon's rule,
                                  ``ngramd.daemon.protocol.requests.check_temperature``);
                                  0 is greedy                              (0)
    debounceMs   int    0..2000   wait after a keystroke before asking     (50)
    timeoutMs    int    100..600000  a daemon answer later than this gives
                                  an empty result                          (8000)
    model        str|null         model for a daemon this LSP starts       (null/"": default)
    device       str              auto | cpu | cuda                        (auto)
    exactKernels bool             the daemon this LSP starts loads a GGUF
                                  with ggml's exact kernels (``ngramd serve
                                  --exact-kernels``)                       (false)
    socket       str|null         daemon socket                            (null/"": default)
    enabled      bool             false: answer nothing, keep syncing      (true)
                                  (``enable``, VS Code's name, is accepted too)
    prepareCompletions  bool      false: no prepared completions, not even
                                  the one the server keeps for a daemon
                                  that comes (the editors' own setting)    (true)

Unknown keys are ignored (editors send their whole section). A known key with a
wrong type or range is refused with a message naming it: ``applied`` keeps that key's
value and applies the others (one bad value must not cost the user the rest, e.g.
``enable: false``); ``updated`` raises ``ValueError`` and applies nothing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ngramd.daemon.protocol.requests import check_temperature  # torch-free: the daemon's own rule

_FIELDS = {
    # camelCase -> (attribute, type, min, max)
    "maxTokens": ("max_tokens", int, 1, 1024),
    "multiline": ("multiline", bool, None, None),
    "temperature": ("temperature", float, None, None),  # checked by _CHECKS
    "debounceMs": ("debounce_ms", int, 0, 2000),
    "timeoutMs": ("timeout_ms", int, 100, 600_000),
    "model": ("model", str, None, None),
    "device": ("device", str, None, None),
    "exactKernels": ("exact_kernels", bool, None, None),
    "socket": ("socket", str, None, None),
    "enabled": ("enabled", bool, None, None),
    "enable": ("enabled", bool, None, None),  # VS Code's setting name, when its section is pulled
    "prepareCompletions": ("prepare_completions", bool, None, None),
}
_NULLABLE = {"model", "socket"}
# Rules the daemon applies to a request: checked here too, so that a value the daemon
# would refuse on every completion is refused once, when the editor sets it.
def _check_socket(value: str) -> None:
    """A path the LSP can resolve as ``ngramd serve`` does (``~user`` must be a known user)."""
    try:
        Path(value).expanduser()
    except RuntimeError as exc:  # "Could not determine home directory"
        raise ValueError(f"must be a path whose ~ can be resolved, got {value!r} ({exc})") from None


_CHECKS: dict[str, Callable[[Any], Any]] = {"temperature": check_temperature, "socket": _check_socket}
_DEVICES = ("auto", "cpu", "cuda")


@dataclass(frozen=True)
class Settings:
    max_tokens: int = 64
    multiline: bool = True
    temperature: float = 0.0
    debounce_ms: int = 50
    timeout_ms: int = 8000
    model: str | None = None
    device: str = "auto"
    exact_kernels: bool = False
    socket: str | None = None
    enabled: bool = True
    prepare_completions: bool = True

    def updated(self, options: Any) -> "Settings":
        """A copy with the camelCase keys of ``options`` applied (see module doc); raises
        ValueError naming the first refused key."""
        new, refused = self.applied(options)
        if refused:
            raise ValueError(refused[0])
        return new

    def applied(self, options: Any) -> tuple["Settings", list[str]]:
        """A copy with every valid camelCase key of ``options`` applied, and why each
        refused one (which keeps its value) was refused."""
        if options is None:
            return self, []
        if not isinstance(options, dict):
            return self, [f"settings must be an object, got {type(options).__name__}"]
        if isinstance(options.get("ngramd"), dict):
            options = options["ngramd"]
        changes: dict[str, Any] = {}
        refused: list[str] = []
        for key, value in options.items():
            if key not in _FIELDS:
                continue
            attr, kind, lo, hi = _FIELDS[key]
            try:
                value = _coerce(key, value, kind, lo, hi, nullable=key in _NULLABLE)
                if key == "device" and value not in _DEVICES:
                    raise ValueError(f"setting 'device' must be one of {_DEVICES}, got {value!r}")
            except ValueError as exc:
                refused.append(str(exc))
                continue
            changes[attr] = value
        return dataclasses.replace(self, **changes), refused

    def to_options(self) -> dict[str, Any]:
        """The camelCase form, as ``ngramd.status`` reports it."""
        return {key: getattr(self, attr) for key, (attr, *_rest) in _FIELDS.items() if key != "enable"}


def _coerce(key: str, value: Any, kind: type, lo: Any, hi: Any, nullable: bool) -> Any:
    if nullable and (value is None or value == ""):
        return None  # editors send "" for "not set"
    if kind is bool:
        ok = isinstance(value, bool)
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ok:
            try:
                value = float(value)
            except OverflowError:  # an int past float's range (JSON allows it)
                raise ValueError(f"setting {key!r} must be a finite number, got an integer of "
                                 f"{len(str(abs(value)))} digits") from None
    else:
        ok = isinstance(value, str) and value != ""
    if not ok:
        raise ValueError(f"setting {key!r} must be a {'non-empty ' if kind is str else ''}"
                         f"{kind.__name__}, got {value!r}")
    if lo is not None and not (lo <= value <= hi):
        raise ValueError(f"setting {key!r} must be in [{lo}, {hi}], got {value!r}")
    if key in _CHECKS:
        try:
            _CHECKS[key](value)
        except ValueError as exc:  # "must be ..., got X": name the setting as the others do
            raise ValueError(f"setting {key!r} {exc}") from None
    return value
