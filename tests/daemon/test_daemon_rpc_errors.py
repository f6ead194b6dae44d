"""The RPC framing's error messages name what went wrong."""

from __future__ import annotations

import pytest

from daemon.rpc import PARSE_ERROR, FrameReader, RpcError


@pytest.mark.parametrize("data", [b"\xc1", b"\x91\xc1"])  # 0xc1 is never used by msgpack
def test_malformed_msgpack_message_says_what_failed(data):
    with pytest.raises(RpcError) as info:
        FrameReader().feed(data)
    assert info.value.code == PARSE_ERROR
    assert str(info.value) != "malformed msgpack: " and "FormatError" in str(info.value)
