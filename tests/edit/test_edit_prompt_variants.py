"""scripts/edit_prompt_variants.py: each variant's prompt says what it claims, in tokens
that are the text's, and the question itself is the one the daemon asks."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from daemon.edit_prompt import build_edit_prompt
from daemon.model import encode_template

_SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
sys.path.insert(0, str(_SCRIPTS))
_SPEC = importlib.util.spec_from_file_location("edit_prompt_variants", _SCRIPTS / "edit_prompt_variants.py")
variants = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(variants)

SRC = "import os\n\n\ndef size(path):\n    return os.path.getsize(path)\n\n\nprint(size('.'))\n"
START, END = SRC.index("def size"), SRC.index("\n\n\nprint") + 1


@pytest.mark.parametrize("variant", variants.VARIANTS)
def test_each_variant_asks_the_same_question_in_its_own_frame(tok_runtime, variant):
    ep = build_edit_prompt(tok_runtime, SRC, START, END, "Rename the parameter path to p.", "file:///w/m.py")
    out = variants.variant_prompt(tok_runtime, ep, variant, "Rename the parameter path to p.", "python")
    question = f"Selection:\n```python\n{ep.shown}\n```\n\nInstruction: Rename the parameter path to p."
    assert out.prompt.endswith(question + "<|im_end|>\n<|im_start|>assistant\n```python")
    assert out.prompt.count("Instruction:") == 1 + {"shots1": 1, "shots2": 2, "no-context-shots2": 2}.get(variant, 0)
    assert ("File `m.py`" in out.prompt) == (not variant.startswith("no-context"))
    assert (out is ep) == (variant == "base")
    # the ids are the text's (the template's specials as specials), and the draft is unchanged
    assert tok_runtime.decode(out.prompt_ids) == out.prompt
    assert out.prompt_ids[-3:] == encode_template(tok_runtime.tokenizer, out.prompt)[-3:]
    assert out.draft_ids == ep.draft_ids
