"""The Language Server (pygls): LSP inline completion and edits, relayed to the daemon.

May import: pygls, lsprotocol, ``ngramd.daemon.protocol`` (the RPC), the standard library.
Never torch, numpy, the index or the rest of the daemon: it starts fast, and an editor's
process holds no model (lsp/README.md).
"""
