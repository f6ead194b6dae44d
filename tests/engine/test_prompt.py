"""Prompt construction with a character-level fake tokenizer (FIM and plain)."""

from __future__ import annotations

from ngramd.daemon.engine.prompt import MAX_HEAL_CHARS, PromptConfig, RecentPrompts, build_prompt, fim_tokens


class FakeTokenizer:
    def __init__(self, fim: bool):
        self.vocab = {chr(i): i for i in range(32, 127)} | {"\n": 10}
        if fim:
            self.vocab |= {"<|fim_prefix|>": 200, "<|fim_suffix|>": 201, "<|fim_middle|>": 202}
        self.inv = {v: k for k, v in self.vocab.items()}
        self.bos_token_id, self.eos_token_id, self.unk_token_id = 300, 301, None

    def get_vocab(self):
        return dict(self.vocab)

    def convert_tokens_to_ids(self, name):
        return self.vocab.get(name, 300)

    def convert_ids_to_tokens(self, token_id):
        return self.inv.get(token_id, "<unk>")


class FakeRuntime:
    def __init__(self, fim: bool):
        self.tokenizer = FakeTokenizer(fim)

    def encode(self, text):
        return [self.tokenizer.vocab[c] for c in text]

    def decode(self, ids):
        return "".join(self.tokenizer.inv.get(i, "?") for i in ids)


def test_fim_prompt_puts_the_suffix_after_the_prefix():
    rt = FakeRuntime(fim=True)
    assert fim_tokens(rt.tokenizer) == (200, 201, 202)
    text = "def f(x):\n    ret\n\nprint(f(1))\n"
    off = text.index("ret") + 3
    p = build_prompt(rt, text, off, PromptConfig(max_prompt_tokens=64, suffix_tokens=8))
    assert p.fim and p.ids[0] == 200 and p.ids[-1] == 202
    s = p.ids.index(201)
    assert rt.decode(p.ids[1:s]) + p.forced == text[:off]
    assert rt.decode(p.ids[s + 1:-1]) == text[off:off + 8]
    assert p.forced == "ret" and p.line_prefix == "    ret"


def test_plain_prompt_is_the_prefix_only_and_bounded():
    rt = FakeRuntime(fim=False)
    text = "".join(f"x{i} = {i}\n" for i in range(500))
    p = build_prompt(rt, text, len(text), PromptConfig(max_prompt_tokens=100))
    assert not p.fim and len(p.ids) <= 100
    assert text.endswith(p.text + p.forced)


def test_empty_prefix_starts_from_a_start_token():
    rt = FakeRuntime(fim=False)
    p = build_prompt(rt, "abc", 0)
    assert p.ids == [300] and p.forced == ""


def test_special_token_literals_in_code_are_plain_text_for_the_prompt_and_the_index(tiny):
    text = "END = '<|im_end|>'\nSEP = '<|endoftext|>'\nx = END"
    p = build_prompt(tiny, text, len(text))
    assert not set(p.ids) & set(tiny.tokenizer.all_special_ids)
    assert p.text + p.forced == text
    # the index tokenizes the same way, so its drafts line up with the prompt's tokens
    (indexed,) = tiny.tokenize_batch([text])
    assert indexed == tiny.encode(text) and indexed[:len(p.ids)] == p.ids


def test_empty_prefix_starts_from_the_document_separator_even_when_it_is_the_unk_token(tiny):
    tok = tiny.tokenizer
    assert tok.unk_token == "<|endoftext|>"  # SmolLM2: the separator is also the unk token
    for text, offset in (("", 0), ("x = 1\n", 0)):
        p = build_prompt(tiny, text, offset)
        assert p.ids == [tok.convert_tokens_to_ids("<|endoftext|>")] and p.text == "<|endoftext|>"


def test_token_healing_backs_off_a_short_chunk_only(tiny):
    text = "def f(x):\n    retu"
    p = build_prompt(tiny, text, len(text))
    assert p.forced in ("retu", " retu") and p.text + p.forced == text
    for tail in ("token = " + "QUJDREVG" * 20, "#" + "-" * 120, "x" * 3000):
        p = build_prompt(tiny, tail, len(tail))
        assert len(p.forced) <= MAX_HEAL_CHARS
        assert p.forced == "" and p.text == tail[-len(p.text):]


def test_a_small_budget_still_sees_the_text_before_the_cursor():
    rt = FakeRuntime(fim=False)
    text = "".join(f"x{i} = {i}\n" for i in range(200))
    offset = text.index("\n", 1000) + 1
    p = build_prompt(rt, text, offset, PromptConfig(max_prompt_tokens=100))
    assert len(p.ids) == 100 and text[:offset].endswith(p.text + p.forced)


def test_a_fim_prompt_keeps_within_its_budget_with_its_three_fim_tokens(tiny_fim):
    text = "\n".join(f"x{i} = {i * 7919 % 10007}" for i in range(3000))
    config = PromptConfig(max_prompt_tokens=300, suffix_tokens=100)
    prompt = build_prompt(tiny_fim, text, len(text) // 2, config)
    assert prompt.fim and len(prompt.ids) == 300


class CountingRuntime(FakeRuntime):
    def __init__(self, fim: bool):
        super().__init__(fim)
        self.encodes = 0

    def encode(self, text):
        self.encodes += 1
        return super().encode(text)


def test_recent_prompts_give_the_prompt_build_prompt_builds_and_build_it_once():
    rt = CountingRuntime(fim=True)
    prompts = RecentPrompts(rt)
    text = "def f(x):\n    ret\n\nprint(f(1))\n"
    off, cfg = text.index("ret") + 3, PromptConfig(max_prompt_tokens=64, suffix_tokens=8)
    first = prompts.build(text, off, cfg)
    built = rt.encodes
    assert built > 0
    assert prompts.build("".join(list(text)), off, cfg) is first  # an equal text, another object
    assert rt.encodes == built  # taken, not built again
    fresh = build_prompt(rt, text, off, cfg)
    assert (list(first.ids), first.text, first.forced, first.line_prefix, first.fim) == \
           (fresh.ids, fresh.text, fresh.forced, fresh.line_prefix, fresh.fim)
    assert isinstance(first.ids, tuple)  # shared between requests: read-only


def test_recent_prompts_build_anew_for_another_text_offset_or_config_and_keep_the_newest():
    rt = CountingRuntime(fim=True)
    prompts = RecentPrompts(rt, size=2)
    text, cfg = "abc = 1\nabd = 2\n", PromptConfig(max_prompt_tokens=64, suffix_tokens=8)
    a = prompts.build(text, 5, cfg)
    assert prompts.build(text, 6, cfg) is not a  # another offset
    b = prompts.build(text.replace("1", "9"), 5, cfg)  # another text (its suffix): a is now the oldest of three, gone
    assert b.ids != a.ids
    assert prompts.build(text, 5, PromptConfig(max_prompt_tokens=32, suffix_tokens=8)) is not a  # another config
    before = rt.encodes
    assert prompts.build(text, 5, cfg) is not a and rt.encodes > before  # evicted: built again
