"""The daemon's RPC service: the asyncio socket server (``server``), the methods and their
validation (``methods``, docs/rpc.md), the open documents, and the one model worker thread.
It reaches the model through the typed ``model_port.ModelPort`` only.

May import: ``ngramd.daemon.workspace``, ``ngramd.daemon.protocol``, ``ngramd.index``. Never torch, ``runtime``,
``engine`` or ``edit``.
"""
