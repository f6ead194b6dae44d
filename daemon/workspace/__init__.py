"""Workspace folders: background indexing and watchdog file events (``watcher``), git and
ignore rules (``ignorer``, ``folder_git``, ``excludes_watch``), and the lowered priority of
background work.

May import: ``ngramd.daemon.protocol``, ``ngramd.index``, watchdog, pathspec. Never torch or the engine.
"""
