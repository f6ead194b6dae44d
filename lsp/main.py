"""``ngramd lsp``: the Language Server over stdio, in front of the shared daemon.

Imports nothing heavy (no torch, no transformers): an editor starts this for every
session, and it must answer ``initialize`` at once. The daemon it talks to is
started on first need (``lsp/daemon_link.py``) and outlives it.

Logging goes to stderr (stdout is the LSP channel); ``NGRAMD_LSP_LOG=debug`` for more.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from ngramd.daemon.protocol.paths import resolve_socket_path
from ngramd.lsp.config import Settings
from ngramd.lsp.handlers import register
from ngramd.lsp.server import NgramdServer
from ngramd.lsp.stdio import start_io


def build_server(socket: str | None = None, model: str | None = None, device: str = "auto",
                 spawn: bool = True, exact_kernels: bool = False) -> NgramdServer:
    """A configured server; the command line's --socket/--model/--device/--exact-kernels are
    the defaults that the editor's settings may override."""
    server = NgramdServer(Settings(model=model, device=device or "auto", exact_kernels=exact_kernels),
                          str(resolve_socket_path(socket)), spawn=spawn)
    register(server)
    return server


def run(args: argparse.Namespace) -> int:
    level = os.environ.get("NGRAMD_LSP_LOG", "warning").upper()
    logging.basicConfig(stream=sys.stderr, level=getattr(logging, level, logging.WARNING),
                        format="ngramd-lsp %(levelname)s %(name)s: %(message)s")
    server = build_server(getattr(args, "socket", None), getattr(args, "model", None),
                          getattr(args, "device", "auto") or "auto",
                          spawn=os.environ.get("NGRAMD_LSP_NO_SPAWN") != "1",
                          exact_kernels=bool(getattr(args, "exact_kernels", False)))
    return start_io(server)  # our framing (lsp/stdio.py): gets back in step after a bad header
