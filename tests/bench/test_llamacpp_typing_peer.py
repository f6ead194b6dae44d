"""The typing replay's llama.cpp peer (daemon/bench/llamacpp_typing.py): llama-cpp-python's own
``Llama`` with its prompt cache answers each request with the text ngramd's plain decoding gives
on the same GGUF, forced prefix included, and reuses its cache between keystrokes."""

from __future__ import annotations

import threading

import pytest

from ngramd.daemon.engine.completer import Completer
from ngramd.daemon.engine.loop import EngineConfig
from ngramd.daemon.protocol.requests import CompletionRequest

SOURCE = ("import math\n\n\ndef circle_area(radius):\n    return math.pi * radius ** 2\n\n\n"
          "def circle_circumference(radius):\n    retu")


@pytest.fixture(scope="module")
def peer(llama_rt):
    from ngramd.daemon.bench.llamacpp_peer import LlamaCppPeers
    from ngramd.daemon.bench.llamacpp_typing import LlamaPeerCompleter

    peers = LlamaCppPeers(llama_rt)
    yield LlamaPeerCompleter(llama_rt, peers.llm("llamacpp_plain"))
    peers.close()


@pytest.mark.real_model
def test_the_peer_answers_as_ngramds_plain_decoding_keystroke_after_keystroke(llama_rt, peer):
    ours = Completer(llama_rt, None, EngineConfig(answer_cache=False, add_history=False, calibrate=False,
                                                  max_caches=1))
    try:
        for cut in (len(SOURCE) - 3, len(SOURCE) - 2, len(SOURCE)):  # "re", "ret", "retu": forced prefixes
            req = CompletionRequest("file:///c.py", SOURCE[:cut], cut, 12, speculate=False)
            theirs, mine = peer.complete(req, threading.Event()), ours.complete(req, threading.Event())
            assert theirs.text == mine.text and theirs.token_ids == mine.token_ids and mine.text
            assert theirs.stop_reason == mine.stop_reason
        # one pass a token: the first evaluates the prompt's uncached rest and gives the first token
        assert theirs.stats.forward_passes == len(theirs.token_ids) + (theirs.stop_reason == "eos")
    finally:
        ours.pool.clear()


@pytest.mark.real_model
def test_a_cancelled_request_stops_between_tokens(peer):
    cancel = threading.Event()
    cancel.set()
    req = CompletionRequest("file:///c.py", SOURCE, len(SOURCE), 32, speculate=False)
    answer = peer.complete(req, cancel)
    assert answer.cancelled and len(answer.token_ids) <= 1
