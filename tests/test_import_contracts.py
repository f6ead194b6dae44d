"""The layers' import rules (pyproject.toml's [tool.importlinter]), checked with import-linter:
on the code as it is, and on a copy with one import that breaks a rule, which must be caught."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(cwd))
    return subprocess.run([str(LINT), "--config", str(ROOT / "pyproject.toml"), "--no-cache"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_code_keeps_every_import_contract(tmp_path):
    _copy_sources(tmp_path)  # linted as a copy: the same tree whether or not the install is editable
    done = _lint(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def _copy_sources(dst: Path) -> None:
    """daemon/, index/ and lsp/ laid out as they install: ngramd/daemon, ... (a namespace ngramd)."""
    for package in ("daemon", "index", "lsp"):
        shutil.copytree(ROOT / package, dst / "ngramd" / package, ignore=shutil.ignore_patterns("__pycache__", "*.md"))


@pytest.mark.parametrize("where, line, broken", [
    ("daemon/engine/stray.py", "from ngramd.daemon.edit import editor\n", "daemon layers"),
    ("daemon/service/stray.py", "import torch\n", "service and workspace reach the model"),
    ("lsp/stray.py", "from ngramd.daemon.service import documents\n", "the LSP server reaches the daemon"),
    ("index/stray.py", "import torch\n", "the index knows no model"),
    ("daemon/edit/stray.py", "from ngramd.daemon.bench import cases\n", "only the command line imports the bench"),
])
def test_an_import_that_breaks_a_rule_fails_the_check(tmp_path, where, line, broken):
    _copy_sources(tmp_path)
    (tmp_path / "ngramd" / where).write_text(line)
    done = _lint(tmp_path)
    assert done.returncode != 0
    assert "Broken contracts" in done.stdout, done.stdout
    assert broken in done.stdout.split("Broken contracts", 1)[1], done.stdout
