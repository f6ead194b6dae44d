"""A daemon that exits because it was asked to says so to its clients (`exiting`), so that an
editor can tell a requested stop (start a daemon at the next request) from a crash."""

from __future__ import annotations

from ngramd.daemon.protocol.rpc import EXITING


def test_every_client_hears_exiting_before_a_requested_shutdown(inproc):
    with inproc.client() as asker, inproc.client() as editor:
        editor.call("initialize", {"client": "test", "workspaceFolders": []})
        assert asker.call("shutdown") is None
        editor.read_until_closed(timeout=10)
        asker.read_until_closed(timeout=10)
        for client in (editor, asker):
            assert [(n.method, n.params) for n in client.notifications] == [(EXITING, {"reason": "shutdown"})]
