"""Speculative edits: a range rewritten after an instruction, with the original text as the
draft (``editor``, ``proposer``), its prompt, indentation, byte re-synchronisation and renames;
``session.EditingCompleter`` is the engine's Completer with edits on top.

May import: ``ngramd.daemon.engine``, ``ngramd.daemon.runtime``, ``ngramd.daemon.protocol``, ``ngramd.index``.
"""
