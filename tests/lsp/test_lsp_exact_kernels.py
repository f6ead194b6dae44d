"""``--exact-kernels`` reaches the daemon an editor's LSP starts: from ``ngramd lsp``'s command
line or the ``exactKernels`` setting, to ``ngramd serve``'s command line."""

from __future__ import annotations

import subprocess

from ngramd.daemon.cli import main as cli
from ngramd.lsp import spawn
from ngramd.lsp.config import Settings
from ngramd.lsp.main import build_server


def _spawned_command(monkeypatch, tmp_path, **kwargs) -> list[str]:
    started = []

    class Recorded:
        def __init__(self, cmd, **_):
            started.append(cmd)

    monkeypatch.setattr(subprocess, "Popen", Recorded)
    spawn.spawn_daemon(str(tmp_path / "d.sock"), None, "auto", **kwargs)
    return started[0]


def test_the_spawned_daemon_gets_the_flag_only_when_asked(monkeypatch, tmp_path):
    assert "--exact-kernels" in _spawned_command(monkeypatch, tmp_path, exact_kernels=True)
    assert "--exact-kernels" not in _spawned_command(monkeypatch, tmp_path)


def test_the_lsp_command_line_and_the_setting_reach_the_link():
    args = cli.build_parser().parse_args(["lsp", "--exact-kernels"])
    assert args.exact_kernels is True
    server = build_server(model=None, spawn=False, exact_kernels=args.exact_kernels)
    assert server.settings.exact_kernels and server.link.exact_kernels
    plain = build_server(spawn=False)
    assert not plain.link.exact_kernels
    assert Settings().updated({"exactKernels": True}).exact_kernels is True
    assert Settings().applied({"exactKernels": "yes"})[1], "a non-boolean is refused"
