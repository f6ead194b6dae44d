"""The daemon's RPC service: the asyncio socket server (``server``), the methods and their
validation (``methods``, docs/rpc.md), the open documents, and the one model worker thread.
It reaches the model through the typed ``model_port.ModelPort`` only.

May import: ``daemon.workspace``, ``daemon.protocol``, ``index``. Never torch, ``runtime``,
``engine`` or ``edit``.
"""
