"""The aligned-pointer proposer for speculative edits: the original text is the draft.

When a model rewrites a range of code following a small instruction ("rename x to
count"), almost all of its output repeats the original range. So the original's
token ids are an almost perfect draft, provided we know *where in the original*
the output currently is. That place is the *pointer*.

Vocabulary (see index/draft.py for drafted / accepted / bonus):

- *original*: the token ids the model is expected to repeat, mostly: the
  original range, followed by whatever closes the answer (a code fence, eos).
- *generated*: the tokens the model has produced so far (context minus prompt).
- *pointer*: index into ``original`` of the next token the output is expected to
  repeat. ``None`` when lost.
- *aligned*: the tokens generated since the last propose equal
  ``original[pointer:pointer + n]``; the pointer simply moves on by n.
- *divergence*: the first generated token that differs from the original at the
  pointer; ``anchor`` remembers where in the original that happened.
- *re-synchronise*: find the longest suffix of the generated tokens (up to
  ``max_n``) that occurs in the original; the pointer goes to just after it.
  A one-token suffix counts only near the anchor; longer ones anywhere, the
  occurrence nearest the anchor first (ties: the later one). The output's last
  *bytes* are looked for too (daemon/edit/byte_sync.py): ``)`` + ``:`` written apart
  still end where the original's ``):`` ends. The byte match is taken when no
  suffix of tokens occurs, or when it implies fewer inserted + deleted bytes than
  the token match (``self, `` deleted: ``value`` ends `` value`` six bytes on,
  where ``(`` ``value`` as tokens occur only far down the body).
- *guess*: right after a divergence that no suffix explains, assume the model
  *replaced* the original token (pointer = anchor + 1); a second branch, when the
  verifier takes trees, assumes it *inserted* a token (pointer = anchor). A guess
  that fails is not repeated: the pointer is lost until a re-sync succeeds, and
  meanwhile the secondary proposer (the n-gram index) drafts, if there is one.
  After a re-sync or a guess the secondary proposer is asked too, and its draft
  goes first when its match is longer than the re-sync's and at least
  ``fallback_min_match`` tokens (a model that loops repeats its own output,
  which daemon/engine/context_lookup.py drafts).
- *learnt rename*: where the output replaced a word of the original by another and
  then followed the original again, that pair is noted; once a word was replaced
  ``rename_sightings`` times, the rest of ``original`` (after the pointer) is
  rewritten with it, so later occurrences are drafted renamed; where the output
  then keeps the old word at two places, the rename is undone (daemon/edit/substitutions.py).
  So ``original`` is what the output is expected to repeat, the range as given
  until a rename is learnt.

Worked example (token ids). original ``[10, 11, 12, 13, 14, 15]``; the model
renames token 12 to 99 and deletes 14: output ``[10, 11, 99, 13, 15]``.

1. propose(generated=[]): pointer 0, draft ``[10, 11, 12, 13, 14, 15]``.
   The verifier accepts 10, 11, rejects 12 and emits 99 instead.
2. propose(generated=[10, 11, 99]): 99 != original[2]: divergence, anchor 2. No
   suffix (``[11, 99]``, ``[99]``) occurs in the original, so guess a
   replacement: pointer 3, draft ``[13, 14, 15]``. Accepts 13, rejects 14, emits 15.
3. propose(generated=[10, 11, 99, 13, 15]): 15 != original[4]: divergence,
   anchor 4. Suffix ``[13, 15]`` is absent; ``[15]`` occurs at 5, near the anchor:
   pointer 6 = the end, nothing left to draft (the fallback may draft).

Draft length adapts: the first draft may cover the whole original (up to
``k_max``); a fully accepted draft doubles k, a rejection halves it (but keeps
at least twice the run just accepted); guesses and one-token re-syncs draft at
most ``k_guess`` tokens, because they are less certain. Rejections here come
from the edit itself rather than from a poor source, so k stays generous:
on CPU a drafted token costs far less than a pass (2 threads: a 64-token pass
208 ms, a 1-token pass 35 ms; docs/benchmarks.md at 53c478e, Engine).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ngramd.daemon.edit.byte_sync import byte_resync, placement_cost, token_starts
from ngramd.daemon.edit.substitutions import Words, apply_substitution, learnable, whole_word_span
from ngramd.daemon.engine.proposer import Proposer
from ngramd.daemon.engine.token_runs import follow, occurrences
from ngramd.index.draft import NO_DRAFT, Branch, Draft, Source

# ---------------------------------------------------------------- pure core


def resync(original: np.ndarray, generated: np.ndarray, anchor: int,
           max_n: int = 8, near: int = 64) -> tuple[int, int] | None:
    """Re-synchronise: where in ``original`` does the output continue?

    original: [n] int32, generated: [g] int32. Tries the suffixes of ``generated``
    from ``max_n`` tokens down to 1; the first length that occurs wins. Among its
    occurrences, the end nearest ``anchor`` wins (ties: the later one). A
    one-token suffix is trusted only within ``near`` tokens of the anchor.
    Returns ``(pointer, n)`` (the position after the match, its length) or None.

    Example: resync([10, 11, 12, 13], [10, 12], anchor=1) == (3, 1):
    ``[10, 12]`` is absent, ``[12]`` ends at 3 (a deletion of 11).
    """
    assert original.ndim == 1 and generated.ndim == 1
    for n in range(min(max_n, len(generated), len(original)), 0, -1):
        ends = occurrences(original, generated[len(generated) - n:])
        if len(ends) == 0:
            continue
        dist = np.abs(ends - anchor)
        if n == 1:
            ok = dist <= near
            ends, dist = ends[ok], dist[ok]
            if len(ends) == 0:
                continue
        best = np.flatnonzero(dist == dist.min())[-1]  # ascending ends: the last is the later
        return int(ends[best]), n
    return None


def adapt_k(k: int, drafted: int, accepted: int, k_min: int, k_max: int) -> int:
    """Next draft length after a round that drafted ``drafted`` and accepted ``accepted``."""
    if drafted == 0:
        return k
    if accepted >= drafted:
        return min(k_max, max(k, 2 * drafted))
    return max(k_min, min(k_max, max(k // 2, 2 * accepted)))


# ---------------------------------------------------------------- state


@dataclass(frozen=True)
class EditProposerConfig:
    k_max: int = 64  # longest draft (the whole original when it is shorter)
    k_min: int = 4
    k_guess: int = 8  # longest draft after a guess or a one-token re-sync
    max_n: int = 8  # longest generated suffix tried when re-synchronising
    near: int = 64  # a one-token re-sync must land within this many tokens of the anchor
    branches: int = 1  # 2: also propose the insertion guess (needs a tree verifier)
    # after a re-sync or a guess, a fallback draft goes first only with a match this long
    # (and longer than the re-sync's): a 2-token match somewhere in the workspace says
    # less than a guess that the model replaced one token of the original
    fallback_min_match: int = 3
    # a word the output changed (a rename) is drafted changed from then on (daemon/edit/substitutions.py;
    # needs token_bytes), once it was changed ``rename_sightings`` times: after one, a change made once
    # (not a rename) cost the replayed edits 25% more passes; after two, nothing (docs/benchmarks.md at 53c478e)
    # a token re-sync gives way to a byte match that implies fewer inserted + deleted bytes
    # (``(value`` far down the body, against `` value`` right after a deleted ``self, ``)
    cheaper_bytes: bool = True
    learn_substitutions: bool = True
    rename_sightings: int = 2
    max_substitutions: int = 16


class EditProposer:
    """Drafts from the original range's token ids, following an aligned pointer.

    ``original``: the tokens the output is expected to repeat ([n] int32).
    ``prompt_len``: the number of context tokens before generation started; what
    follows in the context handed to ``propose`` is the generated output.
    ``fallback``: a secondary proposer (e.g. the n-gram index) used while lost, and
    after a re-sync or a guess when its match is longer (see ``fallback_min_match``).
    ``token_bytes``: the raw bytes of a token id; with it, a re-sync that finds no
    matching tokens matches bytes (daemon/edit/byte_sync.py), so the output is found
    again where its tokens are not the original's (``)`` + ``:`` for ``):``).

    Invariant: after ``propose(context)``, ``pointer`` is None or the position in
    ``original`` where the output continues, given ``context[prompt_len:]``; it is
    derived from the tokens alone, so a wrong guess costs one rejected draft and
    never a wrong output (the verifier decides every token).
    """

    def __init__(self, original: np.ndarray, prompt_len: int,
                 config: EditProposerConfig | None = None, fallback: Proposer | None = None,
                 token_bytes: Callable[[int], bytes] | None = None):
        original = np.asarray(original, dtype=np.int32)
        assert original.ndim == 1
        assert prompt_len >= 0
        self.original = original
        self.token_bytes = token_bytes
        if token_bytes is not None:
            # the original's bytes and its tokens' starts ([n + 1]); the generated bytes and
            # their tokens' starts; the generated byte where the output last left the original
            self._bytes, self._starts = token_starts(original, token_bytes)
            self._bounds = frozenset(self._starts.tolist())
            self._gen = bytearray()
            self._gen_starts: list[int] = []
            self._gen_anchor = 0
        self.prompt_len = prompt_len
        self.cfg = config or EditProposerConfig()
        self.fallback = fallback
        self.pointer: int | None = 0
        self.anchor = 0  # last place in the original where the output was known to be
        self._seen = 0  # generated tokens already explained
        self._guessing = False  # the current pointer is a guess not yet confirmed
        self._k = self.cfg.k_max
        self._last_drafted = 0  # tokens of the best branch in the last draft (0: none or fallback)
        self._used_fallback = False
        self._last_was_guess = False
        self.mode = "aligned"  # aligned | resync | guess | lost: how the last draft was chosen
        self._match_len = 0  # generated tokens that back the pointer after a re-sync (0: a guess,
        # or a byte match within the newest token)
        # substitutions (see daemon/edit/substitutions.py): where the output left the original,
        # (original token, generated token), and where it came back, not yet confirmed by a
        # token that follows (a guess, a one-token re-sync); ``learnt`` counts those applied
        self._left_at: tuple[int, int] | None = None
        self._back_at: tuple[int, int] | None = None
        self._words = Words()
        self._written = np.zeros(len(original), dtype=bool)  # [n]: tokens of ``original`` a rename wrote
        self.learnt = 0

    # -- the seam

    def propose(self, context: np.ndarray, k: int | None = None, w: int | None = None) -> Draft:
        """Draft the continuation of ``context`` (prompt + generated, [t] int32).

        ``k`` caps the tokens of a branch (the engine's remaining budget), ``w``
        the branches; None: no cap beyond the config's.
        """
        assert context.ndim == 1 and len(context) >= self.prompt_len
        generated = np.asarray(context[self.prompt_len:], dtype=np.int32)
        self._update_pointer(generated)
        k_cap = self.cfg.k_max if k is None else min(k, self.cfg.k_max)
        w_cap = self.cfg.branches if w is None else min(w, self.cfg.branches)
        draft = self._draft_from_original(k_cap, w_cap) if k_cap > 0 and w_cap > 0 else NO_DRAFT
        self._used_fallback = False
        if self.fallback is not None and k_cap > 0 and (not draft or self.mode != "aligned"):
            # off the original: the fallback wins when its match is longer than the re-sync's
            # (a model that loops repeats its own output, not the original)
            other = self.fallback.propose(context, k_cap, max(w or 1, 1))
            if other and (not draft or other.best.match_len > max(self._match_len,
                                                                  self.cfg.fallback_min_match - 1)):
                draft, self._used_fallback = other, True
        self._last_drafted = len(draft.best.tokens) if draft and not self._used_fallback else 0
        self._last_was_guess = self._guessing
        return draft

    def feedback(self, num_accepted: int) -> None:
        """The verifier kept ``num_accepted`` tokens of the best branch of the last draft."""
        if self._used_fallback:
            self.fallback.feedback(num_accepted)
        elif self._last_drafted and (num_accepted > 0 or not self._last_was_guess):
            # a failed guess says nothing about run lengths: k stays
            self._k = adapt_k(self._k, self._last_drafted, num_accepted,
                              self.cfg.k_min, self.cfg.k_max)

    # -- internals

    def _update_pointer(self, generated: np.ndarray) -> None:
        new = generated[self._seen:]
        self._seen = len(generated)
        if len(new) == 0:
            return
        first_new = self._append_bytes(new)  # index of new[0] among the generated tokens
        if self.pointer is not None:
            n = follow(self.original, self.pointer, new)
            if n > 0 and self._back_at is not None:  # the output came back where we guessed
                self._learn(generated, self.pointer + n)
            if n == len(new):
                self.pointer += n
                self._move_anchor(self.pointer, self._seen)
                self._guessing = False
                self.mode = "aligned"
                return
            diverged_at = self.pointer + n
            # A failed guess says nothing about where the output diverged; the
            # anchor stays where the output last really followed the original.
            if not self._guessing or n > 0:
                self._move_anchor(diverged_at, first_new + n)
                if self._left_at is None:
                    self._left_at = (diverged_at, first_new + n)
            diverged_last = n == len(new) - 1  # only the newest token differs
            was_guess = self._guessing and n == 0
        else:
            diverged_last, was_guess = False, False
        if diverged_last and not was_guess and self._renames_again(generated):
            return
        found = resync(self.original, generated, self.anchor, self.cfg.max_n, self.cfg.near)
        by_bytes = False
        if self.token_bytes is not None and (found is None or self.cfg.cheaper_bytes):
            to_beat = None if found is None else self._token_match_cost(*found)
            by_bytes_found = self._resync_bytes(to_beat) if to_beat != 0 else None
            if by_bytes_found is not None:  # (a byte match replacing a token match teaches no rename)
                found, by_bytes = by_bytes_found, True
        self._guessing = False
        self._back_at = None
        if found is not None:
            self.pointer, match_len = found
            self.mode = "resync"
            self._match_len = match_len
            self._guessing = match_len <= 1
            if by_bytes:  # a match by bytes need not start at a token: no substitution to learn
                self._left_at = None
            else:
                self._back_at = (self.pointer - match_len, len(generated) - match_len)
                if match_len > 1:  # two tokens that agree: back for sure
                    self._learn(generated, self.pointer)
            if match_len > 1:
                self._move_anchor(self.pointer, self._seen)
            return
        if diverged_last and not was_guess and self.anchor < len(self.original):
            self.pointer = self.anchor + 1
            self.mode = "guess"
            self._match_len = 0
            self._guessing = True
            self._back_at = (self.pointer, len(generated))
            return
        self.pointer = None
        self.mode = "lost"

    def _renames_again(self, generated: np.ndarray) -> bool:
        """The newest token replaced the draft's at the anchor with another spelling of a learnt
        rename (learnt too), or kept the old word where the draft had a rename's new word (that
        place is skipped; kept ``rename_sightings`` times, the rename is undone); either way the
        pointer goes on after it. False otherwise."""
        if self.token_bytes is None or not self.cfg.learn_substitutions or self.anchor >= len(self.original):
            return False
        at, written = self.anchor, self.token_bytes(int(generated[-1]))
        if self._written[at] and (at == 0 or not self._written[at - 1]):  # a rename's new word starts here
            end = at
            while end < len(self.original) and self._written[end]:
                end += 1
            new_word = b"".join(map(self.token_bytes, self.original[at:end].tolist()))
            old_word = self._words.old_for(new_word)
            if old_word is None or not written.strip() or not old_word.startswith(written.strip()):
                return False
            self.pointer = end  # past the new word: the output goes on after the old one
            self._left_at = self._back_at = None
            if self._words.keep(old_word) >= self.cfg.rename_sightings:
                self._undo(old_word, self.pointer)
        elif self._words.is_renamed(self.token_bytes(int(self.original[at])), written):
            self.pointer = at + 1
            self._left_at, self._back_at = (at, len(generated) - 1), (self.pointer, len(generated))
            self._learn(generated, self.pointer)
        else:
            return False
        self.mode = "aligned"  # the pointer is known: no fallback draft goes first
        self._match_len = 0
        self._guessing = False
        self._move_anchor(self.pointer, self._seen)
        return True

    def _undo(self, old: bytes, start: int) -> None:
        """The rename of ``old`` was not one: what it wrote from ``start`` on is the old word again."""
        tokens, written = self.original, self._written
        for old_span, new_span in self._words.forget(old):
            tokens, written = apply_substitution(tokens, start, new_span, old_span, self.token_bytes, written,
                                                 only_written=True)
        self._set_original(tokens, written)

    def _learn(self, generated: np.ndarray, apply_from: int) -> None:
        """The output left the original at ``_left_at`` and came back at ``_back_at``: a word
        change between the two, widened to whole words with the tokens both share, is applied
        to the original from ``apply_from`` on."""
        left, back = self._left_at, self._back_at
        self._left_at = self._back_at = None
        if (left is None or back is None or self.token_bytes is None or not self.cfg.learn_substitutions
                or self.learnt >= self.cfg.max_substitutions):
            return
        span = whole_word_span(self.original, generated, left, back, self.token_bytes)
        if span is None:
            return
        old, new, after = span
        old_bytes, new_bytes = (b"".join(map(self.token_bytes, t.tolist())) for t in (old, new))
        if not learnable(old_bytes, new_bytes, len(old), len(new)):
            return
        start = max(apply_from, after)
        if self._words.renamed_to(old_bytes) not in (None, new_bytes.strip()):
            self._undo(old_bytes, start)  # the word renamed otherwise now: the earlier rename was not one
        # noted also when this spelling does not come again: another spelling may
        if self._words.add(old_bytes, new_bytes, old, new) < self.cfg.rename_sightings:
            return
        tokens, written = self.original, self._written
        for old_span, new_span in self._words.apply(old_bytes):
            tokens, written = apply_substitution(tokens, start, old_span, new_span, self.token_bytes, written)
        if len(tokens) != len(self.original) or not np.array_equal(tokens, self.original):
            self._set_original(tokens, written)
            self.learnt += 1

    def _set_original(self, tokens: np.ndarray, written: np.ndarray) -> None:
        """The draft's source rewritten after the pointer (a rename applied or undone)."""
        self.original, self._written = tokens, written
        self._bytes, self._starts = token_starts(tokens, self.token_bytes)
        self._bounds = frozenset(self._starts.tolist())

    def _append_bytes(self, new: np.ndarray) -> int:
        """Index of the first of ``new`` among the generated tokens; their bytes are appended."""
        first = self._seen - len(new)
        if self.token_bytes is not None:
            for t in new.tolist():
                self._gen_starts.append(len(self._gen))
                self._gen += self.token_bytes(t)
        return first

    def _move_anchor(self, anchor: int, generated_tokens: int) -> None:
        """The output last followed the original at token ``anchor``, after ``generated_tokens``."""
        self.anchor = anchor
        if self.token_bytes is not None:
            self._gen_anchor = (self._gen_starts[generated_tokens] if generated_tokens < len(self._gen_starts)
                                else len(self._gen))

    def _resync_bytes(self, cheaper_than: int | None = None) -> tuple[int, int] | None:
        """``resync`` by bytes: (pointer, generated tokens the match covers), or None when no
        match is found, or none costs less than ``cheaper_than`` inserted + deleted bytes."""
        m = byte_resync(self._bytes, bytes(self._gen), int(self._starts[self.anchor]), self._gen_anchor,
                        self._bounds, self._gen_starts, below=cheaper_than)
        if m is None:
            return None
        covered = len(self._gen_starts) - bisect_left(self._gen_starts, len(self._gen) - m.length)
        return int(np.searchsorted(self._starts, m.end)), covered

    def _token_match_cost(self, pointer: int, n: int) -> int:
        """Inserted + deleted bytes implied by the token re-sync's match (its last ``n`` tokens
        end before ``pointer``), priced as a byte match is."""
        start = int(self._starts[pointer - n])
        return placement_cost(start, int(self._starts[pointer]) - start, len(self._gen) - self._gen_anchor,
                              int(self._starts[self.anchor]))

    def _draft_from_original(self, k_cap: int, w_cap: int) -> Draft:
        if self.pointer is None or self.pointer >= len(self.original):
            return NO_DRAFT
        k = self._k if not self._guessing else min(self._k, self.cfg.k_guess)
        k = min(k, k_cap)
        p = self.pointer
        branches = [Branch(self.original[p:p + k].copy(), 1, Source.EDIT_ORIGINAL, 0)]
        if (w_cap > 1 and self.mode == "guess" and self.anchor < len(self.original)
                and self.original[self.anchor] != self.original[p]):
            # the insertion hypothesis: the original token still comes, after the new one
            a = self.anchor
            branches.append(Branch(self.original[a:a + k].copy(), 1, Source.EDIT_ORIGINAL, 0))
        return Draft(tuple(branches))
