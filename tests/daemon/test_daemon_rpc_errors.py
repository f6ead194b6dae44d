"""The RPC framing's error messages name what went wrong."""

from __future__ import annotations

import pytest

from ngramd.daemon.protocol.rpc import PARSE_ERROR, FrameReader, RpcError


@pytest.mark.parametrize("data", [b"\xc1", b"\x91\xc1"])  # 0xc1 is never used by msgpack
def test_malformed_msgpack_message_says_what_failed(data):
    with pytest.raises(RpcError) as info:
        FrameReader().feed(data)
    assert info.value.code == PARSE_ERROR
    assert str(info.value) != "malformed msgpack: " and "FormatError" in str(info.value)


@pytest.mark.parametrize("key", [b"\x91\x01", b"\x81\x01\x01"], ids=["array key", "map key"])
def test_a_map_key_that_cannot_be_a_key_is_a_parse_error(key):
    """msgpack allows any key; Python's dict does not (unhashable): a parse error, not a crash."""
    request = b"\x94\x00\x07\xa6status\x81" + key + b"\x01"  # [0, 7, "status", {KEY: 1}]
    with pytest.raises(RpcError) as info:
        FrameReader().feed(request)
    assert info.value.code == PARSE_ERROR and "unhashable" in str(info.value)
