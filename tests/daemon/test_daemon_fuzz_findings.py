"""Findings of a fuzzing review of a live daemon: malformed ``file:`` uris, a change from a
client that never opened the document, and the exit with a client that reads nothing."""

from __future__ import annotations

import logging
import socket
import threading

import msgpack
import pytest

from ngramd.daemon.protocol import rpc
from ngramd.daemon.service import server as server_module
from ngramd.daemon.service.documents import DocumentStore, parse_changes
from ngramd.daemon.protocol.rpc import INTERNAL_ERROR, INVALID_PARAMS, RpcError
from daemon_helpers import wait_until

pytestmark = pytest.mark.process

MALFORMED_FILE_URIS = ["file://[/x.py", "file://\uff20/x.py"]  # urlparse: "Invalid IPv6 URL", NFKC netloc


def error_of(client, method, params) -> RpcError:
    with pytest.raises(RpcError) as err:
        client.call(method, params)
    return err.value


@pytest.mark.parametrize("uri", MALFORMED_FILE_URIS)
def test_an_unparseable_file_uri_is_refused_before_anything_opens(inproc, uri):
    with inproc.client() as c:
        err = error_of(c, "open", {"uri": uri, "text": "abc", "version": 1})
        assert err.code == INVALID_PARAMS and "not a valid file uri" in err.message
        status = c.call("status")
    assert status["documents"]["open"] == 0, "a refused open must leave no document behind"
    assert str(INTERNAL_ERROR) not in status["requests"]["errors"]
    assert inproc.index.buffers == {}


@pytest.mark.parametrize("method,params", [
    ("initialize", {"workspaceFolders": [MALFORMED_FILE_URIS[1]]}),
    ("workspaceFolders", {"added": [MALFORMED_FILE_URIS[0]]}),
    ("workspaceFolders", {"removed": [MALFORMED_FILE_URIS[0]]}),
])
def test_an_unparseable_folder_uri_is_invalid_params(inproc, method, params):
    with inproc.client() as c:
        err = error_of(c, method, params)
        assert err.code == INVALID_PARAMS and "not a valid file uri" in err.message
        assert str(INTERNAL_ERROR) not in c.call("status")["requests"]["errors"]


def test_a_client_that_never_opened_a_document_cannot_change_it(inproc):
    """Only a holder's own text may be changed: another client's change would replace it, and
    the holder's next request would be refused as stale."""
    uri = "file:///tmp/shared.py"
    with inproc.client() as a, inproc.client() as b:
        a.call("open", {"uri": uri, "text": "alpha = 1\n", "version": 1})
        err = error_of(b, "change", {"uri": uri, "version": 2, "changes": [{"text": "B WAS HERE\n"}]})
        assert err.code == INVALID_PARAMS and err.message == f"{rpc.DOCUMENT_NOT_OPEN}{uri}"
        err = error_of(b, "complete", {"uri": uri, "offset": 0, "version": 1})
        assert err.code == INVALID_PARAMS and err.message == f"{rpc.DOCUMENT_NOT_OPEN}{uri}"
        a.call("change", {"uri": uri, "version": 2, "changes": [{"start": 0, "end": 0, "text": "#"}]})
        assert a.call("complete", {"uri": uri, "offset": 1, "version": 2})["text"] == " = ahpla"


def test_a_non_holder_is_told_the_document_is_not_open_and_changes_nothing():
    store = DocumentStore()
    store.open(1, "u", "abc", 1)
    for call in (lambda: store.change("u", 2, parse_changes([{"text": "other"}]), conn=2),
                 lambda: store.text_at("u", 1, 2)):
        with pytest.raises(RpcError) as err:
            call()
        assert err.value.code == INVALID_PARAMS and err.value.message == f"{rpc.DOCUMENT_NOT_OPEN}u"
    assert (store.get("u").text, store.get("u").version) == ("abc", 1)
    assert store.text_at("u", 1, 1) == "abc"  # its holder is still in sync


@pytest.mark.parametrize("reader_waits_for", ["room", "input"])
def test_exit_is_clean_with_a_client_that_pipelines_and_never_reads(inproc, caplog, monkeypatch,
                                                                    reader_waits_for):
    """Its answers fill the socket; the daemon stops reading it (back-pressure: "room") or reads
    on while the client sends nothing more ("input"). At the exit nothing may be left running
    for the loop's shutdown to cancel (asyncio logs that with a traceback), and no more of its
    requests are handled."""
    caplog.set_level(logging.WARNING, logger="asyncio")
    monkeypatch.setattr(server_module, "SHUTDOWN_GRACE_S", 0.2)  # this client reads none of it anyway
    server, service = inproc.server, inproc.service
    if reader_waits_for == "input":
        server.max_in_flight = 1 << 30  # never reached: the reader waits for more input
    handled_after_shutdown = []
    dispatch = service.dispatch

    async def recording_dispatch(conn, method, params):
        if method == "status" and service.shutdown_requested.is_set():
            handled_after_shutdown.append(conn)
        return await dispatch(conn, method, params)

    monkeypatch.setattr(service, "dispatch", recording_dispatch)
    silent = socket.socket(socket.AF_UNIX)
    silent.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    silent.connect(str(inproc.sock))
    silent.settimeout(0.2)
    stop_sending = threading.Event()
    sent = [0]

    def writes_blocked() -> bool:  # its answers fill the socket and the daemon's buffer past its limit
        return any(c.writer.transport.get_write_buffer_size() > c.writer.transport.get_write_buffer_limits()[1]
                   for c in list(server.connections.values()))

    def pipeline() -> None:
        request = msgpack.packb([0, 1, "status", {}], use_bin_type=True)
        while not stop_sending.is_set() and not (reader_waits_for == "input" and writes_blocked()):
            try:
                silent.sendall(request)
                sent[0] += 1
            except socket.timeout:
                continue  # the daemon stopped reading: keep it that way
            except OSError:
                return

    sender = threading.Thread(target=pipeline, daemon=True)
    sender.start()
    try:
        if reader_waits_for == "room":  # every request in flight waits to write: none ends
            wait_until(lambda: writes_blocked() and any(
                len(c.tasks) >= server.max_in_flight for c in list(server.connections.values())))
        else:  # every request read: the reader waits in its read, which a close alone never ends
            wait_until(lambda: not sender.is_alive() and service.requests["status"] == sent[0])
        inproc.stop()
        assert not inproc._thread.is_alive(), "the daemon did not exit"
    finally:
        stop_sending.set()
        sender.join(5)
        silent.close()
    errors = [r for r in caplog.records if r.name == "asyncio" and r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]
    assert handled_after_shutdown == []
