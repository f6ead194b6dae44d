"""The VS Code extension: `npm ci` (when node_modules is missing), `npm run compile`,
then its unit tests with `node --test` (no VS Code needed: they cover the pure
modules, settings -> initializationOptions, server path resolution, status bar)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.editors

ROOT = Path(__file__).resolve().parents[2]

EXT = ROOT / "editors" / "vscode"


def _run(cmd: list[str], timeout: int) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=EXT, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def compiled() -> None:
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        pytest.skip("node/npm not found on PATH: the VS Code extension cannot be built here")
    if not (EXT / "node_modules" / "vscode-languageclient").is_dir():
        r = _run([npm, "ci", "--no-audit", "--no-fund"], timeout=600)
        assert r.returncode == 0, f"npm ci failed:\n{r.stdout}\n{r.stderr}"
    shutil.rmtree(EXT / "out", ignore_errors=True)  # a deleted test must not run on from its stale .js
    r = _run([npm, "run", "compile"], timeout=300)
    assert r.returncode == 0, f"tsc failed:\n{r.stdout}\n{r.stderr}"


def test_extension_compiles_to_its_entry_point(compiled: None) -> None:
    assert (EXT / "out" / "extension.js").is_file()
    text = (EXT / "out" / "extension.js").read_text()
    assert "registerProposedFeatures" in text and "vscode-languageclient/node" in text


def test_node_unit_tests_pass(compiled: None) -> None:
    r = _run([shutil.which("node") or "node", "--test", "out/test/"], timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    passed = re.search(r"^# pass (\d+)$", out, re.M)
    failed = re.search(r"^# fail (\d+)$", out, re.M)
    assert passed and failed, out
    assert int(failed.group(1)) == 0, out
    # every test written in src/test ran and passed (a lost file or a renamed test shows here)
    written = {m.group(2) for f in (EXT / "src" / "test").glob("*.ts")
               for m in re.finditer(r"""^\s*test\((["'`])(.*?)\1""", f.read_text(), re.M)}
    ran_ok = set(re.findall(r"^ok \d+ - (.*)$", out, re.M))
    assert len(written) >= 40 and written <= ran_ok, f"not run or not passed: {sorted(written - ran_ok)}\n{out}"
