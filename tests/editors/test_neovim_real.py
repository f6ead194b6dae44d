"""The Neovim plugin in a real terminal: nvim under tmux, typed into with `send-keys`, read back
with `capture-pane`, against `ngramd lsp` and a daemon of its own with the embedded model
(tests/editors/neovim_tmux.py: the ghost text of Neovim >= 0.12's built-in inline completion
and that of the plugin's fallback for Neovim 0.7 are each drawn in their own colour).

<Tab>, the plugin's documented accept key, puts the suggestion into the buffer, which is then
written and read back. Each screen is kept as a PNG (rendered by Chromium where it is
installed) under tests/editors/artifacts/neovim-<version>/; NGRAMD_UPDATE_DOC_IMAGES=1 copies
the ghost-text picture of the newest Neovim to docs/images/.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from neovim_tmux import ROOT, SOURCE, TYPED, _coloured, accept_and_write, neovim, type_until_ghost_text

pytestmark = pytest.mark.editors


@pytest.mark.timeout(900)
@pytest.mark.parametrize("which", ["system", "sid"])
def test_neovim_ghost_text_in_a_terminal(which: str, tmp_path: Path) -> None:
    with neovim(which, tmp_path) as nv:
        tmux = nv.tmux
        ghost, started, waited = type_until_ghost_text(nv)
        other = _coloured(tmux.screen(escapes=True), nv.other_colour)
        assert not other, f"the other ghost text path drew {other!r}"
        nv.keep("ghost-text")
        print(f"{nv.version}: daemon started {started:.1f} s after typing; ghost text {waited:.1f} s later: {ghost!r}")

        # the ghost text's first line is drawn right after the typed text
        typed_line = next(line for line in tmux.screen().splitlines() if TYPED.rstrip() in line)
        first = ghost.split("\n")[0]
        assert typed_line.rstrip().endswith((TYPED + first).rstrip()) or \
            (TYPED.rstrip() + first.rstrip()) in typed_line.replace(TYPED, TYPED.rstrip()), (typed_line, ghost)

        written = accept_and_write(nv)
        inserted = written[len(SOURCE + TYPED):]
        assert inserted.strip(), written
        assert inserted.split("\n")[0].rstrip() == first.rstrip(), (inserted, ghost)
        # the screen shows the buffer, no ghost text left
        assert (TYPED + first).rstrip() in tmux.screen()
        assert not nv.ghost()
    if nv.native and nv.chromium and os.environ.get("NGRAMD_UPDATE_DOC_IMAGES") == "1":
        (ROOT / "docs" / "images").mkdir(exist_ok=True)
        shutil.copy(nv.shots / "ghost-text.png", ROOT / "docs" / "images" / "neovim-ghost-text.png")
