"""Speculative decoding: the loop (``loop``: propose, verify in one pass, accept, roll back),
the acceptance rules, the proposer seam and its sources (index, the context itself, a
fill-in-the-middle view), the draft-size policy and its cost model, the prompt, the stop rules,
and the ``Completer``: the session object that holds a runtime, its KV caches and the policy,
shared by completion and by edits.

May import: ``ngramd.daemon.runtime``, ``ngramd.daemon.protocol``, ``ngramd.index``. Never ``edit``, ``service``,
``workspace``, ``bench`` or ``cli``.
"""
