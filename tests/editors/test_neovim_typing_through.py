"""Typing through a suggestion in a real Neovim (tests/editors/neovim_tmux.py): once ghost text
shows, its first characters are typed one at a time. The daemon remembers its last answer per
document (daemon/engine/answer_cache.py), so a keystroke that only lengthens the unfinished
word (the prompt's forced prefix) is answered from it, with no forward pass; one that starts a
new word moves the prompt's base and is decoded. Either way the ghost text must be the rest of
the original suggestion, and <Tab> must then complete its first line. `ngramd status --json`
says how each keystroke's request was answered.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from neovim_tmux import SOURCE, TYPED, Neovim, accept_and_write, neovim, type_until_ghost_text

pytestmark = pytest.mark.editors

KEYSTROKES = 5  # at most; "(radius ** 2)", the suggestion here, gets "(radi": a hit, a new word, 3 hits

# Neovim >= 0.12's built-in inline completion keeps drawing the last suggestion, less what was
# typed, until the reply comes, so the screen cannot tell that the reply was taken: its handler
# counts them. LspRequest "complete" runs just before the reply's handler (both scheduled in
# order), so what it schedules runs after the handler.
COUNT_REPLIES = """
if vim.fn.has("nvim-0.10") == 1 then
  local replies = 0
  vim.api.nvim_create_autocmd("LspRequest", {{
    callback = function(args)
      local request = args.data and args.data.request
      if request and request.type == "complete" and request.method == "textDocument/inlineCompletion" then
        vim.schedule(function()
          replies = replies + 1
          vim.fn.writefile({{ tostring(replies) }}, {path!r} .. ".tmp")
          os.rename({path!r} .. ".tmp", {path!r})  -- whole: the test never reads it half written
        end)
      end
    end,
  }})
end
"""


def _replies(path: Path) -> int:
    try:
        return int(path.read_text())
    except FileNotFoundError:
        return 0


def _settled(nv: Neovim) -> dict[str, Any]:
    """The daemon's figures once its worker is idle: the prefetch queued after an answer (which
    counts its own hits, and the tokens it decodes ahead) is done, so two reads differ by whole jobs."""
    def idle() -> dict[str, Any] | None:
        s = nv.status()
        return s if s is not None and s["requests"]["running"] is None and not s["requests"]["queued"] else None

    s = nv.wait_for(idle, "the daemon to be idle", 120)
    cache = s["engine"]["answer_cache"]
    # a prefetch served from an earlier prefetch counts in both hits and prefetch_hits: their
    # difference is the requests answered from a remembered answer of the editor's
    return {"requests": s["engine"]["requests"], "hits": cache["hits"],
            "typed_through": cache["hits"] - cache["prefetch_hits"], "passes": s["generation"]["forward_passes"]}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("which", ["system", "sid"])
def test_neovim_typing_through_a_suggestion(which: str, tmp_path: Path) -> None:
    replies = tmp_path / "replies"
    with neovim(which, tmp_path, "-typing-through", COUNT_REPLIES.format(path=str(replies))) as nv:
        tmux = nv.tmux
        ghost, started, waited = type_until_ghost_text(nv)
        nv.keep("ghost-text")
        first = ghost.split("\n")[0]
        n = min(KEYSTROKES, len(first.rstrip()) - 1)  # something left to show after the last one
        assert n >= 2, f"a suggestion too short to type through: {ghost!r}"

        def shows(k: int) -> bool:
            """The line holds TYPED and the first k characters, and the ghost text is the rest."""
            line = next((line for line in tmux.screen().splitlines() if TYPED.rstrip() in line), "")
            return (TYPED + first).rstrip() in line and nv.ghost().split("\n")[0].rstrip() == first[k:].rstrip()

        before = _settled(nv)
        steps = []
        for k in range(1, n + 1):
            s0, r0 = _settled(nv), _replies(replies)
            tmux.keys(first[k - 1], literal=True)
            nv.wait_for(lambda: (not nv.native or _replies(replies) > r0) and shows(k),
                        f"the ghost text {first[k:]!r} after typing {first[:k]!r}", 120)
            s1 = _settled(nv)
            steps.append({key: s1[key] - s0[key] for key in s1})
            nv.keep(f"typed-{k}")
        after = _settled(nv)
        print(f"{nv.version}: daemon started {started:.1f} s after typing; ghost text {waited:.1f} s later: "
              f"{ghost!r}; typed {first[:n]!r}, each keystroke's request: {steps}")

        for k, step in enumerate(steps, 1):
            assert step["requests"] == 1, (first[:k], steps)  # one request per keystroke: each is answered first
            # generation counts the editor's requests only (a prefetch is idle-time work, left out),
            # so a request answered from memory adds no pass and one decoded adds some
            assert (step["typed_through"], step["passes"] == 0) in ((1, True), (0, False)), (first[:k], steps)
        assert sum(step["typed_through"] for step in steps) >= 1, \
            f"no keystroke of {first[:n]!r} was answered from the remembered suggestion: {steps}"
        assert after["hits"] - before["hits"] >= sum(step["typed_through"] for step in steps), (before, after)

        written = accept_and_write(nv)
        # the typed characters and the accepted rest make the suggestion's first line, once
        assert written[len(SOURCE + TYPED):].split("\n")[0].rstrip() == first.rstrip(), (written, ghost)
