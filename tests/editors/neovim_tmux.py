"""A real Neovim under tmux against `ngramd lsp` and a daemon of its own with the embedded model,
shared by the real-terminal Neovim tests (test_neovim_real.py, test_neovim_typing_through.py).

- Neovim >= 0.12 (Debian sid's, from editors/fetch_neovim.sh): the built-in
  vim.lsp.inline_completion draws the ghost text (highlight ComplHint);
- Neovim 0.7 (Debian's /usr/bin/nvim): the plugin's extmark fallback draws it (NgramdGhost).

Each highlight gets its own colour, so the screen tells which one drew the suggestion.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from screen_png import render_png  # tests/editors/screen_png.py

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "editors" / "neovim"
FETCHED = ROOT / "editors" / ".neovim"
ARTIFACTS = ROOT / "tests" / "editors" / "artifacts"
ON_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
COLUMNS, ROWS = 100, 24
# 256-colour indexes, in no default colour scheme: the ghost text is told apart from the code
FALLBACK_COLOUR, NATIVE_COLOUR = 201, 208

SOURCE = '''import math


def circle_area(radius):
    """Return the area of a circle of the given radius."""
    return math.pi * radius ** 2


def circle_circumference(radius):
    """Return the circumference of a circle of the given radius."""
'''
TYPED = "    return 2 * "

INIT = """
vim.opt.rtp:prepend({plugin!r})
vim.o.swapfile = false
vim.o.autoindent = false
vim.o.shada = ""
vim.o.termguicolors = false
vim.o.laststatus = 2
vim.o.number = true
vim.cmd("filetype on")
vim.cmd("filetype indent off")
vim.cmd("syntax on")
require("ngramd").setup({{
  cmd = {{ {server!r}, "lsp", "--socket", {sock!r} }},
  filetypes = {{ "python" }},
  timeout_ms = 60000,
}})
-- the plugin's fallback ghost text and the built-in inline completion's, each its own colour
vim.cmd("highlight NgramdGhost ctermfg={fallback} guifg=#ff00ff")
vim.cmd("highlight ComplHint ctermfg={native} guifg=#ff8700")
"""


def cannot_run(reason: str) -> None:
    if ON_CI:
        pytest.fail(f"CI must run the real Neovim test, but: {reason}")
    pytest.skip(reason)


def _nvim(which: str) -> str:
    if which == "system":
        found = shutil.which("nvim")
        if not found:
            cannot_run("nvim not found on PATH (editors/ci.sh installs Debian's neovim)")
        return found
    wrapper = FETCHED / which / "nvim"
    if not os.access(wrapper, os.X_OK):
        cannot_run(f"{wrapper} is missing: `bash editors/fetch_neovim.sh {which}` fetches it (editors/ci.sh does)")
    return str(wrapper)


class Tmux:
    """One tmux server of its own (its socket in the test's folder) with one window."""

    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        self.socket = folder / "tmux.sock"
        self.env = env
        self.target = "e2e:0.0"

    def __call__(self, *args: str) -> str:
        r = subprocess.run(["tmux", "-S", str(self.socket), "-f", "/dev/null", *args], env=self.env,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, f"tmux {args}: {r.stderr}"
        return r.stdout

    def start(self, command: list[str], cwd: Path) -> None:
        self("new-session", "-d", "-s", "e2e", "-x", str(COLUMNS), "-y", str(ROWS), "-c", str(cwd),
             "-e", "TERM=screen-256color", *command)
        self("set-option", "-g", "default-terminal", "screen-256color")

    def keys(self, *keys: str, literal: bool = False) -> None:
        self("send-keys", "-t", self.target, *(["-l"] if literal else []), *keys)

    def screen(self, escapes: bool = False) -> str:
        return self("capture-pane", "-p", "-t", self.target, *(["-e"] if escapes else []))

    def kill(self) -> None:
        subprocess.run(["tmux", "-S", str(self.socket), "kill-server"], env=self.env, capture_output=True, timeout=60)


def _wait_for(cond, what: str, timeout: float, tmux: Tmux | None):
    """Poll ``cond`` until truthy (returned); on a timeout fail with the screen and Neovim's logs
    (``tmux`` None: before the terminal runs)."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline and tmux is None:
            pytest.fail(f"timed out waiting for {what}")
        if time.monotonic() > deadline:
            logs = sorted(Path(tmux.env["XDG_CACHE_HOME"]).glob("nvim/*.log")) + \
                sorted(Path(tmux.env["XDG_STATE_HOME"]).glob("nvim/*.log"))
            told = "\n".join(f"--- {p}\n{p.read_text(errors='replace')[-4000:]}" for p in logs)
            pytest.fail(f"timed out waiting for {what}; the screen:\n{tmux.screen()}\n{told}")
        time.sleep(0.1)


def _status(server: Path, sock: Path, env: dict[str, str]) -> dict[str, Any] | None:
    """`ngramd status --json` of the daemon on ``sock``; None where none answers (it listens once it is ready)."""
    r = subprocess.run([str(server), "status", "--socket", str(sock), "--json"], capture_output=True, text=True,
                       timeout=60, env=env)
    try:
        reply = json.loads(r.stdout)
    except ValueError:
        return None
    return reply if r.returncode == 0 and isinstance(reply, dict) and "error" not in reply else None


def _daemon_runs(server: Path, sock: Path, env: dict[str, str]) -> bool:
    """Whether a daemon answers `ngramd status` on ``sock``."""
    return _status(server, sock, env) is not None


def _coloured(screen_with_escapes: str, colour: int) -> str:
    """The text drawn in 256-colour ``colour`` (foreground), runs joined by newlines."""
    runs, current = [], None
    for token in re.split(r"(\x1b\[[0-9;:]*m)", screen_with_escapes):
        if token.startswith("\x1b["):
            codes = token[2:-1]
            if re.search(rf"(^|;)38[;:]5[;:]{colour}(;|$)", codes):
                current = []
                runs.append(current)
            elif codes == "" or any(c in ("0", "39", "38") or re.fullmatch(r"3[0-7]|9[0-7]", c)
                                    for c in re.split("[;:]", codes)):
                current = None
        elif current is not None:
            current.append(token)
    return "\n".join("".join(r) for r in runs if "".join(r).strip())


@dataclass
class Neovim:
    """A Neovim editing ``target`` under ``tmux``, its daemon on ``sock``."""

    version: str  # the first line of `nvim --version`
    minor: int
    native: bool  # the built-in inline completion draws the ghost text (else the plugin's fallback)
    server: Path  # the ngramd executable
    sock: Path
    env: dict[str, str]
    tmux: Tmux
    target: Path  # the file being edited
    shots: Path  # where `keep` puts the screens
    chromium: str | None

    @property
    def colour(self) -> int:
        """The colour of the ghost text of this Neovim's path."""
        return NATIVE_COLOUR if self.native else FALLBACK_COLOUR

    @property
    def other_colour(self) -> int:
        return FALLBACK_COLOUR if self.native else NATIVE_COLOUR

    def ghost(self) -> str:
        """The ghost text on the screen now ("" where there is none)."""
        return _coloured(self.tmux.screen(escapes=True), self.colour)

    def wait_for(self, cond, what: str, timeout: float):
        return _wait_for(cond, what, timeout, self.tmux)

    def status(self) -> dict[str, Any] | None:
        return _status(self.server, self.sock, self.env)

    def keep(self, name: str) -> None:
        """The screen, as ANSI text and (where Chromium is) as a PNG, under ``shots``."""
        screen = self.tmux.screen(escapes=True)
        (self.shots / f"{name}.ansi").write_text(screen)
        if self.chromium:
            render_png(screen, self.shots / f"{name}.png", self.chromium, COLUMNS, ROWS, f"{self.version}: {name}")


@contextmanager
def neovim(which: str, tmp_path: Path, shots_suffix: str = "", lua: str = "") -> Iterator[Neovim]:
    """Neovim ``which`` ("system" or a build under editors/.neovim) on SOURCE, in a terminal; the
    daemon is started by the first completion. ``lua``: more of the init file. The screens go to
    tests/editors/artifacts/neovim-<version><shots_suffix>/, emptied first."""
    if not shutil.which("tmux"):
        cannot_run("tmux is not installed")
    nvim = _nvim(which)
    version = subprocess.run([nvim, "--version"], capture_output=True, text=True, timeout=60).stdout.split("\n")[0]
    minor = int(re.search(r"v0\.(\d+)\.", version).group(1))
    server = Path(os.environ.get("NGRAMD_E2E_SERVER") or ROOT / ".venv" / "bin" / "ngramd")
    if not os.access(server, os.X_OK):
        cannot_run(f"{server} is missing: `make install` makes it")

    home, project, sock = tmp_path / "home", tmp_path / "project", tmp_path / "d" / "ngramd.sock"
    for d in (home, project, sock.parent):
        d.mkdir(parents=True)
    (project / "pyproject.toml").write_text("[project]\nname = 'geometry'\n")
    target = project / "geometry.py"
    target.write_text(SOURCE)
    init = tmp_path / "init.lua"
    init.write_text(INIT.format(plugin=str(PLUGIN), server=str(server), sock=str(sock),
                                fallback=FALLBACK_COLOUR, native=NATIVE_COLOUR) + lua)
    env = dict(os.environ, HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"),
               XDG_DATA_HOME=str(home / ".local" / "share"), XDG_STATE_HOME=str(home / ".local" / "state"),
               XDG_CACHE_HOME=str(home / ".cache"), XDG_RUNTIME_DIR=str(tmp_path / "run"),
               NGRAMD_LSP_LOG="info")  # into Neovim's lsp.log, shown when the test fails
    env.pop("TMUX", None)
    (tmp_path / "run").mkdir(mode=0o700)
    shots = ARTIFACTS / f"neovim-0.{minor}{shots_suffix}"
    shutil.rmtree(shots, ignore_errors=True)
    shots.mkdir(parents=True)
    chromium = os.environ.get("NGRAMD_E2E_CHROMIUM") or shutil.which("chromium")

    tmux = Tmux(tmp_path, env)
    editor: subprocess.Popen | None = None
    try:
        args = ["-u", str(init), "-i", "NONE", "-n", str(target)]
        if which == "system":
            tmux.start([nvim, *args], project)
        else:
            # A fetched Neovim runs through its suite's dynamic loader (editors/fetch_neovim.sh),
            # so its TUI cannot start its own `nvim --embed` (v:progpath is the loader): the
            # editor runs headless on a socket and the terminal shows it with --remote-ui.
            listen = tmp_path / "nvim.sock"
            editor = subprocess.Popen([nvim, "--headless", "--listen", str(listen), *args], cwd=project, env=env,
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=(tmp_path / "nvim.err").open("w"))
            _wait_for(listen.exists, "Neovim's socket", 60, None)
            tmux.start([nvim, "--remote-ui", "--server", str(listen)], project)
        yield Neovim(version, minor, minor >= 12, server, sock, env, tmux, target, shots, chromium)
    finally:
        tmux.kill()
        if editor is not None:
            editor.kill()
            editor.wait(timeout=60)
        if sock.exists():
            subprocess.run([str(server), "stop", "--socket", str(sock)], capture_output=True, timeout=60, env=env)


def type_until_ghost_text(nv: Neovim) -> tuple[str, float, float]:
    """Open a last line and type TYPED on it until ghost text shows: the ghost text, the seconds
    the daemon took to start, and those the ghost text took after the last keystroke."""
    tmux = nv.tmux
    nv.wait_for(lambda: "circle_circumference" in tmux.screen(), "the file on the screen", 60)
    tmux.keys("G", "o")  # Insert mode on a new last line
    nv.wait_for(lambda: "-- INSERT --" in tmux.screen(), "Insert mode", 60)
    # all but the last character; the first completion starts the daemon, whose first start
    # loads the model and times its passes (minutes on a busy machine); the last character
    # is typed once it runs, and the ghost text's clock starts then
    tmux.keys(TYPED[:-1], literal=True)
    nv.wait_for(lambda: any(line.rstrip().endswith(TYPED.rstrip()) for line in tmux.screen().splitlines()),
                "the typed text", 60)
    t0 = time.monotonic()
    nv.wait_for(lambda: _daemon_runs(nv.server, nv.sock, nv.env), "the daemon to start", 300)
    started = time.monotonic() - t0
    tmux.keys(TYPED[-1], literal=True)
    t0 = time.monotonic()
    ghost = nv.wait_for(nv.ghost, "ghost text", 120)
    return ghost, started, time.monotonic() - t0


def accept_and_write(nv: Neovim) -> str:
    """Tab on the ghost text, then :w; the file as written, which starts with SOURCE + TYPED."""
    tmux = nv.tmux
    tmux.keys("Tab")
    nv.wait_for(lambda: not nv.ghost(), "the ghost text to go", 60)
    nv.keep("accepted")
    tmux.keys("Escape")
    tmux.keys(":w", "Enter")
    # Neovim truncates the file and then writes it: read it once it says the write is done
    nv.wait_for(lambda: re.search(r"\d+B written", tmux.screen()), "the buffer to be written", 60)
    written = nv.target.read_text()
    assert written.startswith(SOURCE + TYPED), written
    return written
