"""What one message may cost the daemon: objects built, time to describe it, memory per reader."""

from __future__ import annotations

import tempfile
import tracemalloc
from pathlib import Path

import msgpack
import pytest
from daemon_helpers import InProcessDaemon

from ngramd.daemon.protocol import rpc
from ngramd.daemon.protocol.client import DaemonUnavailable
from ngramd.daemon.protocol.rpc import (
    INTERNAL_ERROR, INVALID_REQUEST, MAX_MESSAGE_OBJECTS, FrameReader, FrameTooLarge, RpcError, decode,
    pack_request,
)


def many_nils_request() -> bytes:
    """[0, 1, "status", [[nil] * 2^20, [nil] * (2^20 - 2)]]: 2 MB on the wire, 2^21 + 8 objects
    (each array counts itself), the limit passed at the last byte: a message refused before its
    end fails its sender's next send, as the daemon closes the connection."""
    return pack_request(1, "status", [[None] * (1 << 20), [None] * ((1 << 20) - 2)])


def feed_in_reads(frames: FrameReader, data: bytes, read: int = 64 * 1024) -> list:
    out = []
    for i in range(0, len(data), read):
        out += frames.feed(data[i:i + read])
    return out


def test_a_message_of_many_tiny_objects_under_the_byte_limit_is_too_large():
    """An empty map is one byte on the wire and ~70 in memory: 66 MB of them took 5 GB."""
    data = many_nils_request()
    assert len(data) < rpc.DEFAULT_MAX_MESSAGE_BYTES and MAX_MESSAGE_OBJECTS == 1 << 21
    with pytest.raises(FrameTooLarge) as info:
        feed_in_reads(FrameReader(), data)
    assert info.value.code == INVALID_REQUEST and f"larger than {MAX_MESSAGE_OBJECTS} objects" in info.value.message


def test_objects_are_counted_in_maps_across_reads_and_afresh_for_each_message(monkeypatch):
    monkeypatch.setattr(rpc, "MAX_MESSAGE_OBJECTS", 150)
    # 48 empty maps, the map of them (1 + 2 * 48) and the message (1 + 4): 150 objects
    fits = pack_request(1, "status", {i: {} for i in range(48)})
    frames = FrameReader()
    assert len(frames.feed(fits * 3)) == 3
    assert len(feed_in_reads(frames, fits * 3, read=7)) == 3
    over = pack_request(2, "status", {i: {} for i in range(49)})  # 49 + 99 + 5
    with pytest.raises(FrameTooLarge):
        feed_in_reads(FrameReader(), over, read=7)


def open_arrays_of_empty_maps(depth: int, maps: int) -> bytes:
    """``depth`` arrays, each of ``maps`` empty maps and then the next array, the last never closed."""
    one = b"\xdd" + (maps + 1).to_bytes(4, "big") + b"\x80" * maps
    return one * depth


def test_empty_maps_in_arrays_not_yet_closed_are_counted(monkeypatch):
    """An array is complete (and was counted) only once its last item is: 8 open arrays of
    2^20 empty maps, 8 MB, counted 0 objects and took 600 MB (4.8 GB at 64 MB)."""
    monkeypatch.setattr(rpc, "MAX_MESSAGE_OBJECTS", 1000)
    data = open_arrays_of_empty_maps(depth=3, maps=999)
    frames = FrameReader()
    with pytest.raises(FrameTooLarge) as info:
        feed_in_reads(frames, data)
    assert "larger than 1000 objects" in info.value.message
    assert frames._objects.count <= 1001  # refused at the first object past the limit


def test_a_map_is_described_by_its_first_keys_unsorted():
    """reprlib sorts every key of a map to show 4 of them: 2^20 keys held the daemon's loop 0.7 s."""
    with pytest.raises(RpcError) as info:
        decode([9, dict.fromkeys([5, 3, 9, 1, 7, 2])])
    assert info.value.message == "not a msgpack-RPC message: [9, {5: None, 3: None, 9: None, 1: None, ...}]"


def test_a_large_document_in_one_string_is_read():
    text = "def f(x):\n    return x + 1\n" * 300_000  # 8 MB, fed in the server's 64 KiB reads
    got = feed_in_reads(FrameReader(), pack_request(1, "open", {"uri": "u", "text": text, "version": 1}))
    assert [decode(o).params["text"] == text for o in got] == [True]


def test_a_message_of_too_many_objects_gets_the_fatal_notice():
    with tempfile.TemporaryDirectory(prefix="ngd-") as d:
        daemon = InProcessDaemon(Path(d) / "s.sock", max_message_bytes=8 << 20)
        try:
            with daemon.client() as bad, daemon.client() as good:
                bad.send_raw(many_nils_request())
                note = bad.wait_notification("error")
                assert note.params["fatal"] and note.params["code"] == INVALID_REQUEST
                assert "objects" in note.params["message"]
                with pytest.raises(DaemonUnavailable):
                    bad.call("status")
                assert good.call("status")["daemon"]["ready"]
        finally:
            daemon.stop()


_EIGHT_MILLION_MAPS = [[{}] * (1 << 20)] * 8  # one list and one map, referenced 8M times: 16 MB as text
_BIG_BYTES = b"x" * (8 << 20)


@pytest.mark.parametrize("message", [
    [3, 1, "status", _EIGHT_MILLION_MAPS],  # not a message
    [3, _BIG_BYTES],
    [3, msgpack.ExtType(5, _BIG_BYTES)],
    [1, 1, _EIGHT_MILLION_MAPS, None],  # a response whose error is not a map ...
    [1, 1, {"code": 1, "message": _EIGHT_MILLION_MAPS}, None],  # ... or whose message is not text
    [1, 1, {"code": 1, "data": _EIGHT_MILLION_MAPS}, None],  # ... or who has none
], ids=["invalid", "bytes", "ext", "error", "error message", "error without message"])
def test_a_huge_message_is_described_from_its_start_only(message):
    """Rendering a 66 MB message whole to keep 80 characters of it froze the daemon for 5 s:
    the description is built without ever holding more than a little text."""
    tracemalloc.start()
    try:
        try:
            text = decode(message).error["message"]
        except RpcError as exc:
            text = exc.message
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20 and len(text) <= 200
    assert text.startswith(("not a msgpack-RPC message: [3, ", "[[{}, {}", "{'code': 1, 'data': [[{}"))


def test_a_response_error_that_is_not_text_reads_as_str_would_show_it():
    assert decode([1, 7, ["a", 1], None]).error == {"code": INTERNAL_ERROR, "message": "['a', 1]"}
    assert decode([1, 7, {"code": 2}, None]).error == {"code": 2, "message": "{'code': 2}"}
    assert decode([1, 7, {"code": 2, "message": "no"}, None]).error["message"] == "no"


def test_a_reader_starts_with_a_small_buffer():
    """msgpack's default first buffer is 1 MiB per connection; freed as clients came and
    went, it fragmented the daemon's memory (20k connections kept 1.7 GB)."""
    FrameReader()  # anything allocated once, on first use
    tracemalloc.start()
    try:
        readers = [FrameReader() for _ in range(10)]
        per_reader = tracemalloc.get_traced_memory()[0] / len(readers)
    finally:
        tracemalloc.stop()
    assert per_reader < 128 * 1024  # msgpack's own state is ~41 KiB of it
