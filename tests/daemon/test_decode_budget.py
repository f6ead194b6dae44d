"""One decode budget for all connections together (daemon/protocol/decode_budget.py; issue 33
item 6): a connection whose message would take the messages in progress past it waits, unread,
until another's completes; two that would wait for each other: the later one is refused."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from ngramd.daemon.protocol.decode_budget import DecodeBudget
from ngramd.daemon.protocol.rpc import ERROR_NOTICE, RpcError, pack_request

sys.path.insert(0, str(Path(__file__).parent))
from daemon_helpers import wait_until  # noqa: E402


def _message(chars: int) -> bytes:
    return pack_request(1, "complete", {"uri": "u", "text": "a" * chars, "offset": 0})


def test_a_second_large_message_waits_for_the_first_and_the_budget_holds(inproc):
    budget = inproc.server.decode_budget  # one message's worth: max_message_bytes, 1 MiB here
    first, second = _message(700_000), _message(700_000)
    with inproc.client() as a, inproc.client() as b:
        a.send_raw(first[:-1])
        wait_until(lambda: budget.bytes >= 600_000)
        b.send_raw(second[:-1])
        wait_until(lambda: budget.figures()["waiting"] == 1)  # b is not read on
        assert budget.bytes <= budget.max_bytes
        a.send_raw(first[-1:])
        assert a.wait(1)["text"] == "aaaaaaaa"
        b.send_raw(second[-1:])
        assert b.wait(1)["text"] == "aaaaaaaa"
        assert budget.counts["peak_bytes"] <= budget.max_bytes and budget.counts["refused"] == 0
        wait_until(lambda: budget.bytes == 0)


def test_two_connections_that_would_wait_for_each_other_the_later_is_refused(inproc):
    budget = inproc.server.decode_budget
    first, second = _message(900_000), _message(900_000)
    with inproc.client() as a, inproc.client() as b:
        a.send_raw(first[:400_000])
        wait_until(lambda: budget.bytes >= 300_000)
        b.send_raw(second[:400_000])
        wait_until(lambda: budget.bytes >= 600_000)
        a.send_raw(first[400_000:-1])
        wait_until(lambda: budget.figures()["waiting"] == 1)
        b.send_raw(second[400_000:500_000])  # would wait for a, which waits for b: refused
        notice = b.wait_notification(ERROR_NOTICE)
        assert notice.params["fatal"] and notice.params["message"].startswith("busy")
        a.send_raw(first[-1:])
        assert a.wait(1)["text"] == "aaaaaaaa"  # a goes on
        assert budget.counts["refused"] == 1 and budget.counts["peak_bytes"] <= budget.max_bytes


def test_a_connection_alone_always_goes_on_and_small_messages_never_wait():
    async def go():
        budget = DecodeBudget(max_bytes=1000, max_objects=100, wait_s=0.0, free_bytes=100)
        await budget.reserve("a", 50_000, 5_000)  # alone: its FrameReader bounds it
        await budget.reserve("b", 100, 0)  # within its free bytes
        with pytest.raises(RpcError, match="busy"):
            await budget.reserve("b", 200, 0)
        budget.release("a")
        await budget.reserve("b", 200, 0)
        assert budget.bytes == 100
    asyncio.run(go())
