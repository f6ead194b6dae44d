"""A model behind one interface (``base.Runtime``, with its per-document ``base.KVCache``),
chosen and loaded by ``loading``: the llama.cpp runtime (``llamacpp``: a GGUF at its own
quantization, on the CPU) or the torch runtime (``model``: Hugging Face models, CUDA, a GGUF
de-quantized) with its explicit KV cache (``kv_cache``) and fast CPU kernels (``fast_linear``,
``fast_attention``). Both read token ids through ``tokenizer`` (a GGUF's: ``gguf_tokenizer``);
the engine keeps their caches in ``cache_pool``; ``tree`` lays out a draft tree in one pass.

May import: ``ngramd.daemon.protocol``, torch, transformers, numpy; only ``model``, ``kv_cache`` and
the fast kernels import torch, so the llama.cpp path never loads it. Nothing above the seam
(``engine``, ``edit``, ``service``) knows which runtime runs.
"""
