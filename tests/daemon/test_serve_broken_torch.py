"""``serve`` on the torch runtime where torch cannot be imported (a broken install): the one
"cannot load the model" line and exit 1, as for any load that fails unforeseen, not a traceback."""

from __future__ import annotations

import sys

from ngramd.daemon.cli import main as cli


def test_serve_with_a_torch_that_cannot_be_imported_says_the_model_cannot_load(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    monkeypatch.delitem(sys.modules, "ngramd.daemon.runtime.model", raising=False)  # imported again: it imports torch
    assert cli.main(["serve", "--model", "tiny", "--socket", str(tmp_path / "s.sock")]) == 1
    err = capsys.readouterr().err
    assert "ngramd: cannot load the model: ModuleNotFoundError" in err and "torch" in err
    assert "Traceback" not in err
    assert not (tmp_path / "s.sock").exists()
