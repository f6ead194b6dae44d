"""encode_template: special-token strings become their ids; the pattern is built once per tokenizer."""

from __future__ import annotations

from dataclasses import dataclass

from ngramd.daemon.runtime.tokenizer import encode_template


@dataclass(frozen=True)
class _Added:
    content: str
    special: bool


class CountingTokenizer:
    """One id per character (ord), two special tokens; counts reads of the added-token table."""

    def __init__(self) -> None:
        self.table_reads = 0
        self.added = {1: _Added("<|im_start|>", True), 2: _Added("<|im_end|>", True), 3: _Added("<x>", False)}

    @property
    def added_tokens_decoder(self) -> dict[int, _Added]:
        self.table_reads += 1
        return dict(self.added)

    def __len__(self) -> int:
        return 1000 + len(self.added)

    def __call__(self, texts, add_special_tokens=False, split_special_tokens=True):
        assert split_special_tokens and not add_special_tokens
        return {"input_ids": [[ord(c) for c in t] for t in texts]}


def test_specials_become_their_ids_and_text_stays_plain():
    tok = CountingTokenizer()
    assert encode_template(tok, "<|im_start|>a<x><|im_end|>") == [1, ord("a"), *map(ord, "<x>"), 2]
    assert encode_template(tok, "ab") == [ord("a"), ord("b")]


def test_the_special_token_pattern_is_built_once_per_tokenizer():
    tok, other = CountingTokenizer(), CountingTokenizer()
    first = [encode_template(tok, f"<|im_start|>{i}<|im_end|>") for i in range(5)]
    assert tok.table_reads == 1
    assert first == [[1, ord(str(i)), 2] for i in range(5)]
    encode_template(other, "<|im_end|>")  # a cache per tokenizer, not one shared
    assert other.table_reads == 1
    # a tokenizer given a new special token is read again
    tok.added[4] = _Added("<|new|>", True)
    assert encode_template(tok, "<|new|>") == [4] and tok.table_reads == 2


def test_the_real_tokenizer_gives_the_same_ids_on_repeated_calls(tiny):
    text = "<|im_start|>user\nfix <|im_end|> this<|im_end|>\n<|im_start|>assistant\n"
    ids = encode_template(tiny.tokenizer, text)
    assert ids == encode_template(tiny.tokenizer, text)
    assert ids[0] == 1 and ids.count(2) == 2  # the literal "<|im_end|>" after "fix " is a special here
