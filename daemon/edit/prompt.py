"""The prompt for a speculative edit, the draft it implies, and how the answer is cleaned.

An edit rewrites ``text[start:end]`` (the *original*) following an *instruction*.
The model sees the file around the range, the instruction and the original, and
answers with the *replacement* inside a fenced code block. The answer is written
so that, when the model changes little, its token ids repeat the original's:
that is the draft (daemon/edit/proposer.py).

Two prompt styles:

- ``chat`` (the tokenizer has a chat template, e.g. the embedded
  SmolLM2-135M-Instruct): a system message, then one user message holding the
  file excerpt (the range replaced by ``<selection/>``), the original in a fence
  and the instruction; then the assistant turn, *pre-filled* with the opening
  fence ``` ```python ``` (no newline). The model's answer starts with the
  newline and the code.
- ``plain`` (a base model, no chat template)::

      File: NAME (excerpt, the selection replaced by <selection/>)
      ```python
      BEFORE<selection/>AFTER
      ```
      Selection:
      ```python
      ORIGINAL
      ```
      Instruction: INSTRUCTION
      Rewritten selection:
      ```python

  (the last line without its newline: the model writes it).

How the answer ends: the model writes the code, then a newline and the closing
fence and a newline, then (chat) ``<|im_end|>``. The answer ends at its closing line
(daemon/engine/stops.py ``FenceNesting``: a bare fence line at column 0 that closes no fenced block
the answer opened itself; a docstring's `` ```sh `` example does not end it), at the
end-of-sequence token (all of it is then code) or at ``max_tokens`` (unfinished). The fence
is three backticks, or more when the selection itself contains a run of three or more, so
that the selection cannot close it; the model still closes such a fence with three, so a
bare run of three at column 0 ends the answer too once the answer has had as many such
lines as the selection as shown (``short_text``: those are copies). Outside Markdown, a first
line that opens the fence again (```` ```python ````, the model repeating the opening) is
skipped, unless the selection itself starts with a fence line (``reopening``).

The selection is shown in its own indentation frame (daemon/edit/indent.py):
a method selected from its ``def`` on is shown dedented, as the model writes a
function, and the answer is indented back before it is applied. Its layout (the
trailing blank lines, the next line's indentation where the selection ends in it)
is not shown, and is put back after the answer. ``shown`` below is the selection
so dedented, without its layout.

The draft is the shown selection exactly as the model would write it back
unchanged: ``"\\n" + shown + "\\n" + fence + "\\n"`` then eos (the embedded model ends its closing
fence line, which is where the answer ends, before its end-of-turn token). The prompt ends right after ``python`` (a non-space), so
the newline and the first line's indentation form one token (``"\\n   "``) just as
they did in training text; the prompt's and the draft's token ids concatenate to
the ids of the concatenated text (tested).

Tokens: only the template's own special-token strings become special tokens;
the user's text (file, selection, instruction) is encoded as plain text
(daemon/runtime/tokenizer.py ``encode_plain``), so a ``"<|im_end|>"`` literal in the code
is text to the model and in the draft, never an end of sequence.

Cleaning (``clean_answer``): drop the leading newline and a skipped first line, cut at the
closing line (the same rules as the generation's stop) and drop the answer's own
trailing line breaks; ``EditPrompt.replacement`` then indents it back and puts the
selection's layout after it. The end-of-sequence token is never part of the answer's text,
so a ``<|im_end|>`` in it is the code's own and kept.

Line breaks: a selection whose line breaks are all CRLF is shown, with the file around it,
and drafted with LF, as the model writes code (it answers LF whatever it is shown, so a CRLF
draft would fail at every line), and the answer's line breaks become CRLF again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ngramd.daemon.edit.indent import IndentFrame, frame_of, layout_of, split_layout
from ngramd.daemon.runtime.tokenizer import encode_template
from ngramd.daemon.engine.stops import FenceNesting, bare_short_lines

SELECTION = "<selection/>"
SYSTEM = ("You are a careful code editor. The user selects code in a file and gives an "
          "instruction. Answer with the complete rewritten selection in one fenced code "
          "block, and nothing else. Change only what the instruction asks; keep every "
          "other line, comment and indentation exactly as it is.")

CONTEXT_LINES_BEFORE = 40
CONTEXT_LINES_AFTER = 15
CONTEXT_CHARS = 3000  # per side, after the line limit
_USER_PLACEHOLDER = "\x00ngramd-user-message\x00"  # stands for the user message while rendering the template
_LEADING_BLANK_LINES = re.compile(r"\A(?:[ \t]*\r?\n)+")

_LANGS = {
    "py": "python", "pyi": "python", "js": "javascript", "mjs": "javascript", "ts": "typescript",
    "tsx": "tsx", "jsx": "jsx", "rs": "rust", "go": "go", "c": "c", "h": "c", "cc": "cpp",
    "cpp": "cpp", "hpp": "cpp", "java": "java", "kt": "kotlin", "lua": "lua", "rb": "ruby",
    "sh": "bash", "bash": "bash", "md": "markdown", "toml": "toml", "yaml": "yaml",
    "yml": "yaml", "json": "json", "html": "html", "css": "css", "sql": "sql", "vim": "vim",
}


class EditRangeError(ValueError):
    """The range to rewrite is not inside the document."""


@dataclass(frozen=True)
class EditPrompt:
    """What the engine needs for one edit."""

    style: str  # "chat" | "plain"
    prompt: str  # the exact text given to the model
    prompt_ids: list[int]
    draft_ids: list[int]  # the answer if the model repeated the shown selection: the proposer's source
    original: str  # text[start:end]
    shown: str  # the original's code as the prompt shows it, in its indentation frame
    frame: IndentFrame  # puts the cleaned answer back into the file's indentation
    layout: str  # put back after the answer's code (daemon/edit/indent.py layout_of)
    fence: str
    short_text: int = 0  # bare runs of three backticks that are text before one closes the answer (FenceNesting)
    reopening: bool = False  # a first answer line that opens the fence again is skipped (FenceNesting)
    crlf: bool = False  # the selection's line breaks are CRLF: shown and drafted as LF, put back as CRLF

    def stop_config(self) -> dict[str, Any]:
        """The StopConfig fields that end the answer where ``clean_answer`` will cut it (and not
        where a completion's block ends: a rewritten range may dedent)."""
        return {"closing_fence": self.fence, "short_text": self.short_text, "reopening": self.reopening,
                "block_end": False}

    def replacement(self, answer: str, finished: bool) -> str:
        """The text that replaces the selection, from the model's answer (the text after the
        opening fence); ``finished``: the model ended it (its closing fence, or end of sequence).

        An answer with no code deletes the selection, layout and all (a selection with no
        code of its own stays as it is); after an indentation lead, blank lines the answer opens
        with are dropped unless the shown selection opens with one (they would leave the lead,
        kept in the file, as trailing whitespace); an unfinished answer is given indented back
        as written. In a CRLF selection the answer's line breaks become CRLF.
        """
        code, finished = clean_answer(answer, self.fence, finished, self.short_text, self.reopening)
        if not finished:
            return self._in_file(code)
        if not code.strip():
            return "" if self.shown.strip() else self.original
        first, newline, _ = self.shown.partition("\n")
        if self.frame.lead and (not newline or first.strip(" \t\r")):
            # after the indentation that stays in the file (not after code, whose line an opening
            # line break ends), where the selection does not open with a blank line itself
            code = _LEADING_BLANK_LINES.sub("", code)
        return self._in_file(code) + self.layout

    def _in_file(self, code: str) -> str:
        """``code`` (as shown) back in the file's indentation and line breaks."""
        code = self.frame.reindent(code)
        if not self.crlf:
            return code
        if "\r" not in self.shown:  # a CRLF the model wrote itself is one line break, not \r\r\n
            code = code.replace("\r\n", "\n")
        return code.replace("\n", "\r\n")  # the exact inverse of the showing


def check_range(text: str, start: int, end: int) -> None:
    """Raise ``EditRangeError`` unless ``0 <= start <= end <= len(text)``."""
    for name, value in (("start", start), ("end", end)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise EditRangeError(f"{name} must be an int offset, got {value!r}")
    if start > end:
        raise EditRangeError(f"start ({start}) is after end ({end})")
    if start < 0 or end > len(text):
        raise EditRangeError(f"range {start}..{end} is outside the document (0..{len(text)})")


def language_of(uri: str) -> str:
    """The fence's language tag from a file name or uri ("" when unknown)."""
    name = uri.rsplit("/", 1)[-1]
    ext = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    return _LANGS.get(ext, "")


def fence_for(original: str) -> str:
    """Three backticks, or one more than the longest run of backticks in ``original``."""
    longest = max((len(m) for m in re.findall(r"`{3,}", original)), default=0)
    return "`" * max(3, longest + 1)


def excerpt(text: str, start: int, end: int) -> str:
    """The file around the range, the range itself replaced by ``SELECTION``: the last
    ``CONTEXT_LINES_BEFORE`` lines before it, then their last ``CONTEXT_CHARS`` characters, and
    likewise after it. Only ``CONTEXT_CHARS`` on each side are read (splitting the whole text took
    ~60 ms for an 8M-character document, twice per prepared edit, on the model's thread)."""
    # Within the window, more pieces than lines wanted: the first piece (maybe cut) is not among them.
    before_pieces = text[max(0, start - CONTEXT_CHARS):start].split("\n")
    before = "\n".join(before_pieces[-CONTEXT_LINES_BEFORE:])
    after_pieces = text[end:end + CONTEXT_CHARS].split("\n")
    after = "\n".join(after_pieces[:CONTEXT_LINES_AFTER])
    return before + SELECTION + after


def draft_text(shown: str, fence: str) -> str:
    """The answer that repeats the ``shown`` selection unchanged (see the module docstring)."""
    return "\n" + shown + "\n" + fence + "\n"


def clean_answer(answer: str, fence: str, finished: bool, short_text: int = 0,
                 reopening: bool = False) -> tuple[str, bool]:
    """(code, finished): the code of the model's answer (the text after the opening fence), in
    the frame it was shown, without its trailing line breaks. The answer ends at its closing
    line (daemon/engine/stops.py ``FenceNesting``, with ``short_text`` and ``reopening``: the rules the
    generation stopped by) or, when ``finished`` (the model ended it), at its end; otherwise it
    is unfinished and given as written.

    Example: clean_answer("\\n    y = 1\\n\\n```", "```", True) == ("    y = 1", True).
    """
    answer = answer.removeprefix("\r\n") if answer.startswith("\r\n") else answer.removeprefix("\n")
    nesting = FenceNesting(fence, short_text, reopening)
    # a finished answer's last line is complete: the model wrote nothing after it
    closing = nesting.closing_line(answer + "\n" if finished else answer)
    start = min(nesting.content_start, len(answer))
    if closing is not None:
        return split_layout(answer[start:max(closing - 1, start)])[0], True  # a CRLF answer's last \r included
    if finished:
        return split_layout(answer[start:])[0], True
    return answer[start:], False


def build_edit_prompt(runtime: Any, text: str, start: int, end: int, instruction: str,
                      uri: str = "") -> EditPrompt:
    """Prompt, draft and stop rules for rewriting ``text[start:end]``.

    ``runtime`` needs ``tokenizer`` (for ``chat_template``) and ``encode`` /
    ``eos_token_id`` (daemon/runtime/tokenizer.py's TokenizerMethods).
    """
    check_range(text, start, end)
    if not isinstance(instruction, str) or not instruction.strip():
        raise ValueError("the instruction is empty")
    original = text[start:end]
    frame = frame_of(text, start, end)
    shown = frame.dedent(split_layout(original)[0])
    crlf = uses_crlf(text, start, end)
    lang = language_of(uri)
    fence = fence_for(original)
    name = uri.rsplit("/", 1)[-1] or "untitled"
    context = excerpt(text, start, end)
    if crlf:  # as the model writes code, which the draft must repeat
        shown, context = shown.replace("\r\n", "\n"), context.replace("\r\n", "\n")
    tokenizer = getattr(runtime, "tokenizer", None)
    if getattr(tokenizer, "chat_template", None):
        style = "chat"
        user = file_block(name, fence, lang, context) + question(fence, lang, shown, instruction)
        before, after = _chat_template_around_user(tokenizer)
        after += fence + lang
        prompt = before + user + after
        # the template's own special tokens are specials; the user's text (code, name,
        # instruction) is plain, so a "<|im_end|>" in the code stays text
        prompt_ids = encode_template(tokenizer, before) + list(runtime.encode(user)) + encode_template(tokenizer, after)
    else:
        style = "plain"
        prompt = (f"File: {name} (excerpt, the selection replaced by {SELECTION})\n"
                  f"{fence}{lang}\n{context}\n{fence}\n"
                  f"Selection:\n{fence}{lang}\n{shown}\n{fence}\n"
                  f"Instruction: {instruction.strip()}\n"
                  f"Rewritten selection:\n{fence}{lang}")
        prompt_ids = list(runtime.encode(prompt))
    eos = getattr(runtime, "eos_token_id", None)
    draft_ids = list(runtime.encode(draft_text(shown, fence)))
    if eos is not None:
        draft_ids.append(int(eos))
    return EditPrompt(style=style, prompt=prompt, prompt_ids=prompt_ids,
                      draft_ids=draft_ids, original=original, shown=shown, frame=frame,
                      layout=layout_of(text, start, end), fence=fence,
                      short_text=bare_short_lines(shown, fence),
                      # not in Markdown, where an answer may well open with a code block of its own
                      reopening=lang != "markdown" and not shown.strip().startswith("```"), crlf=crlf)


def uses_crlf(text: str, start: int, end: int) -> bool:
    """Whether the selection's line breaks are all CRLF, or, with none of its own, the line
    break that ends its line (else the one before it) is.

    Example: uses_crlf("a\\r\\nb\\r\\n", 0, 4) is True; uses_crlf("a\\r\\nb\\n", 0, 6) is False.
    """
    breaks = text.count("\n", start, end)
    if breaks:
        return text.count("\r\n", start, end) == breaks
    after = text.find("\n", end)
    at = after if after >= 0 else text.rfind("\n", 0, start)
    return at > 0 and text[at - 1] == "\r"


def file_block(name: str, fence: str, lang: str, context: str) -> str:
    """The chat prompt's user message, first part: the file around the selection."""
    return f"File `{name}` (excerpt; the selection is shown as {SELECTION}):\n{fence}{lang}\n{context}\n{fence}\n\n"


def question(fence: str, lang: str, shown: str, instruction: str) -> str:
    """The chat prompt's user message, second part: the selection and the instruction."""
    return f"Selection:\n{fence}{lang}\n{shown}\n{fence}\n\nInstruction: {instruction.strip()}"


def _chat_template_around_user(tokenizer: Any) -> tuple[str, str]:
    """The rendered chat template before and after the user message's content (the
    generation prompt included), found by rendering a placeholder in its place."""
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": _USER_PLACEHOLDER}]
    head = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    parts = head.split(_USER_PLACEHOLDER)
    if len(parts) != 2:
        raise ValueError("the model's chat template does not show the user message verbatim; "
                         "edits need a template that does")
    return parts[0], parts[1]
