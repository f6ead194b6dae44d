"""The Neovim plugin in headless Neovim (tests/editors/nvim/run.lua):
- unit: the pure Lua modules (positions in UTF-16/32/8, ghost text, options);
- fake: the plugin against tests/editors/fake_lsp_server.py, which pins the client's
  side of the protocol (inline completion request and fallback ghost text, accept,
  cycling, stale replies, CRLF suggestions, incremental sync, initializationOptions,
  toggle, status, rewrite with its document version) and real Insert-mode typing with the debounce;
- real: `ngramd lsp --model tiny` with its own daemon: a suggestion reaches the buffer.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.editors

ROOT = Path(__file__).resolve().parents[2]

RUN_LUA = ROOT / "tests" / "editors" / "nvim" / "run.lua"
FAKE_SERVER = ROOT / "tests" / "editors" / "fake_lsp_server.py"
PLUGIN = ROOT / "editors" / "neovim"


# The system's Neovim (Debian's 0.7 in CI) and newer ones from Debian's archive, fetched by
# editors/ci.sh with editors/fetch_neovim.sh (0.10 from trixie, the newest from sid): the
# plugin has code paths per version (0.8 vim.lsp.start, 0.10 inline virtual text,
# 0.11 client method calls, 0.12 position encodings and vim.lsp.inline_completion).
FETCHED = ROOT / "editors" / ".neovim"
NVIMS = ["system", "trixie", "sid"]


@pytest.fixture(params=NVIMS)
def nvim(request: pytest.FixtureRequest) -> str:
    if request.param == "system":
        found = shutil.which("nvim")
        if not found:
            pytest.skip("nvim not found on PATH (editors/ci.sh installs Debian's neovim)")
        return found
    wrapper = FETCHED / request.param / "nvim"
    if not os.access(wrapper, os.X_OK):
        pytest.skip(f"{wrapper} is missing: `bash editors/fetch_neovim.sh {request.param}` fetches it "
                    "(editors/ci.sh does, where Debian's archive can be reached)")
    return str(wrapper)


def run_suite(nvim: str, tmp_path: Path, suite: str, cmd: list[str] | None = None, timeout_ms: int = 10000,
              process_timeout: int = 120) -> list[str]:
    out = tmp_path / f"{suite}.out"
    env = dict(os.environ, NGRAMD_TEST_SUITE=suite, NGRAMD_TEST_DIR=str(tmp_path / "work"),
               NGRAMD_TEST_OUT=str(out), NGRAMD_TEST_TIMEOUT_MS=str(timeout_ms),
               XDG_STATE_HOME=str(tmp_path / "state"), XDG_CONFIG_HOME=str(tmp_path / "config"))
    if cmd is not None:
        env["NGRAMD_TEST_CMD"] = json.dumps(cmd)
    proc = subprocess.run(
        [nvim, "--headless", "-u", "NONE", "-i", "NONE", "-n",
         "--cmd", f"set rtp^={PLUGIN}", "-c", f"luafile {RUN_LUA}"],
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=process_timeout)
    lines = out.read_text().splitlines() if out.exists() else []
    report = "\n".join(lines) + f"\n--- nvim rc={proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    assert lines and lines[-1].startswith("done "), f"the Lua tests did not finish:\n{report}"
    failures = [line for line in lines if line.startswith("not ok")]
    assert not failures, report
    assert proc.returncode == 0, report
    return [line[3:] for line in lines if line.startswith("ok ")]


def test_lua_units(nvim: str, tmp_path: Path) -> None:
    passed = run_suite(nvim, tmp_path, "unit")
    assert len(passed) >= 10, passed


def test_plugin_against_fake_server(nvim: str, tmp_path: Path) -> None:
    passed = run_suite(nvim, tmp_path, "fake", [sys.executable, str(FAKE_SERVER)])
    # Every test in the fake suite, by name fragment, so that none silently drops out.
    for fragment in ("initializes", "initializationOptions", "accepted into the buffer", "negotiated encoding",
                     "without the closer it replaces",
                     "cycle", "snippet", "changed meanwhile", "incremental sync", ":NgramdStatus",
                     ":NgramdToggle", "charwise selection", "typed from a charwise selection",
                     "<Cmd> mapping in Visual mode", "'selection' exclusive", "setup() again with enabled = false",
                     "stale selection", "returned edit", "document version",
                     "changed during the prompt", "prepare the rewrite", "past the last line", "twice at once", "CRLF",
                     "server exits before answering",
                     "typing in Insert mode", "Replace mode", "<BS> after an accept", "another window",
                     "<BS> right after an accept deletes the accepted text",
                     "deletes across the accepted line break", "<BS> past the accepted text",
                     "<C-c>", "prepareCompletion is sent once the cursor rests",
                     "not sent again for the same position", "not sent in Visual mode",
                     "just asked for a completion", "prepare_completions = false",
                     "no ngramd client is attached", "not sent from the command line",
                     "where a scroll left the cursor", "stops a prepared completion still waiting",
                     "cancelled with <C-c> at its prompt", "no file name", "setup() again",
                     "renamed buffer", "without an option"):
        assert any(fragment in p for p in passed), f"{fragment!r} not among passed tests: {passed}"


@pytest.mark.parametrize("fetched", ["sid"])
def test_plugin_native_inline_completion(fetched: str, tmp_path: Path) -> None:
    """Neovim >= 0.12 draws suggestions with the built-in vim.lsp.inline_completion."""
    wrapper = FETCHED / fetched / "nvim"
    if not os.access(wrapper, os.X_OK):
        pytest.skip(f"{wrapper} is missing: `bash editors/fetch_neovim.sh {fetched}` fetches it")
    version = subprocess.run([str(wrapper), "--version"], capture_output=True, text=True, timeout=60).stdout
    if not any(f"NVIM v0.{minor}." in version for minor in range(12, 30)):
        pytest.skip(f"Debian {fetched}'s Neovim is older than 0.12: {version.splitlines()[:1]}")
    passed = run_suite(str(wrapper), tmp_path, "native", [sys.executable, str(FAKE_SERVER)])
    for fragment in ("suggest() asks again without accepting", "setup() again with enabled switches",
                     "leaves off a buffer's switch the user turned off"):
        assert any(fragment in p for p in passed), f"{fragment!r} not among passed tests: {passed}"


@pytest.fixture
def real_lsp(tmp_path: Path):
    """`ngramd lsp --model tiny` through this interpreter, on a private socket; the
    daemon it spawns is stopped afterwards."""
    if not (ROOT / "lsp" / "main.py").is_file():
        pytest.skip("lsp/main.py is not there yet")
    sock = tmp_path / "d" / "ngramd.sock"
    yield [sys.executable, "-m", "ngramd.daemon.cli", "lsp", "--model", "tiny", "--socket", str(sock)]
    if sock.exists():
        subprocess.run([sys.executable, "-m", "ngramd.daemon.cli", "stop", "--socket", str(sock)],
                       cwd=ROOT, capture_output=True, timeout=60)


def test_plugin_against_real_server_tiny_model(nvim: str, tmp_path: Path, real_lsp: list[str]) -> None:
    # The daemon loads torch and the tiny model on first use: allow minutes on a busy CPU.
    passed = run_suite(nvim, tmp_path, "real", real_lsp, timeout_ms=240_000, process_timeout=400)
    assert any("reaches the buffer" in p for p in passed), passed
    assert any("daemon's figures" in p for p in passed), passed
