"""A model behind one interface (``base.Runtime``, with its per-document ``base.KVCache``):
the torch runtime (``model``: Hugging Face models, CUDA, a GGUF de-quantized), its explicit KV
cache (``kv_cache``), its fast CPU kernels (``fast_linear``, ``fast_attention``) and the layout
of a draft tree in one pass (``tree``).

May import: ``daemon.protocol``, torch, transformers, numpy. Nothing above the seam
(``engine``, ``edit``, ``service``) knows which runtime runs.
"""
