"""The wire between the daemon and its clients: msgpack-RPC framing and errors (``rpc``),
a synchronous client and how a daemon is started (``client``), where the socket lives and how it
is claimed safely (``paths``), the request and result types (``requests``) and the one
line-break rule (``lines``).

May import: msgpack and the standard library only. The LSP server (``lsp/``) imports this
package and nothing else of the daemon, so it starts without torch.
"""
