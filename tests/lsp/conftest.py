"""Fixtures for the LSP tests (tests/lsp).

- ``sock``: a short unix-socket path in a private temp dir (socket paths are limited
  to ~107 bytes, pytest's tmp_path can be longer);
- ``fake``: the fake daemon (lsp_fake_daemon.py) serving ``sock`` in the test's loop;
- ``lsp_client``: a factory that spawns ``ngramd lsp --socket SOCK`` and returns an
  initialized pytest-lsp client whose capabilities include inlineCompletion.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
import pytest_asyncio
from lsprotocol import types
from pytest_lsp import make_test_lsp_client

sys.path.insert(0, str(Path(__file__).parent))
from lsp_fake_daemon import FakeDaemon  # noqa: E402
from lsp_helpers import client_capabilities  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def sock():
    d = tempfile.mkdtemp(prefix="ngl-", dir="/tmp")
    yield os.path.join(d, "d.sock")
    shutil.rmtree(d, ignore_errors=True)


@pytest_asyncio.fixture
async def fake(sock):
    daemon = await FakeDaemon(sock).start()
    yield daemon
    await daemon.stop()


@pytest_asyncio.fixture
async def lsp_client():
    """``await lsp_client(sock, **options)`` -> an initialized client; stopped at teardown."""
    started = []

    async def start(socket_path: str, *, options: dict | None = None, spawn: bool = False,
                    model: str | None = None, capabilities: types.ClientCapabilities | None = None,
                    root: str | None = None, extra_args: tuple[str, ...] = ()):
        client = make_test_lsp_client()
        env = dict(os.environ, NGRAMD_LSP_LOG=os.environ.get("NGRAMD_LSP_LOG", "warning"))
        if not spawn:
            env["NGRAMD_LSP_NO_SPAWN"] = "1"
        cmd = [sys.executable, "-m", "ngramd.daemon.cli", "lsp", "--socket", socket_path]
        if model:
            cmd += ["--model", model, "--device", "cpu"]
        cmd += list(extra_args)
        await client.start_io(*cmd, env=env, cwd=str(REPO))
        started.append(client)
        folders = [types.WorkspaceFolder(uri=Path(root).as_uri(), name="ws")] if root else None
        await client.initialize_session(types.InitializeParams(
            capabilities=capabilities or client_capabilities(),
            initialization_options={"debounceMs": 0, **(options or {})},
            workspace_folders=folders,
        ))
        return client

    yield start
    for client in started:
        try:
            await client.shutdown_session()
        except Exception:
            pass
        await client.stop()
