-- Pure text helpers: position encodings and the shape of a suggestion.
-- No Neovim API here, so the functions can be tested on plain strings (Lua 5.1/LuaJIT).
--
-- Vocabulary:
--   byte column:  0-based offset in bytes into a line (what nvim_win_get_cursor and
--                 extmarks use);
--   LSP column:   0-based offset in code units of the client's position encoding
--                 ("utf-16" by default, "utf-8" or "utf-32" if negotiated);
--   typed prefix: the part of an inline completion's range that lies before the cursor:
--                 text the user already typed, that the suggestion repeats;
--   ghost text:   what is drawn after the cursor: the suggestion minus the typed prefix
--                 (and minus an end that rewrites the text its range replaces after the cursor).
local M = {}

-- Length in bytes of the UTF-8 sequence that starts with byte `c`.
local function seq_len(c)
  if c < 0x80 then
    return 1
  elseif c < 0xE0 then
    return 2
  elseif c < 0xF0 then
    return 3
  end
  return 4
end

-- Code units one character of `len` UTF-8 bytes takes in `encoding`.
local function units(len, encoding)
  if encoding == "utf-8" then
    return len
  elseif encoding == "utf-32" then
    return 1
  end
  return len == 4 and 2 or 1 -- utf-16: characters beyond the BMP are surrogate pairs
end

-- Walks `line` one character at a time while fewer than `max_units` LSP units lie before
-- the cursor and its byte index is at most `max_byte` (1-based); returns the byte column
-- (0-based, clamped to the line) and the LSP units passed.
local function walk(line, encoding, max_units, max_byte)
  local seen, i = 0, 1
  while i <= #line and seen < max_units and i <= max_byte do
    local len = seq_len(line:byte(i))
    seen = seen + units(len, encoding)
    i = i + len
  end
  return math.min(i - 1, #line), seen
end

--- Byte column of LSP column `col` in `line`; clamped to the line's end.
function M.byte_col(line, col, encoding)
  if encoding == "utf-8" then
    return math.max(0, math.min(col, #line))
  end
  return (walk(line, encoding, col, math.huge))
end

--- LSP column of byte column `byte` in `line`.
function M.lsp_col(line, byte, encoding)
  if encoding == "utf-8" then
    return math.max(0, math.min(byte, #line))
  end
  local _, seen = walk(line, encoding, math.huge, byte)
  return seen
end

--- "\r\n" and "\r" as "\n": a buffer line never holds a line break (a CRLF document's
--- suggestions carry "\r\n"; Neovim keeps 'fileformat' apart from the lines).
function M.normalize_breaks(s)
  return (s:gsub("\r\n?", "\n"))
end

--- Splits on line breaks ("\n", "\r\n", "\r"), keeping empty pieces: "a\n" -> {"a", ""}.
function M.split_lines(s)
  s = M.normalize_breaks(s)
  local out, start = {}, 1
  while true do
    local i = s:find("\n", start, true)
    if not i then
      out[#out + 1] = s:sub(start)
      return out
    end
    out[#out + 1] = s:sub(start, i - 1)
    start = i + 1
  end
end

--- Plain text of an LSP snippet: "${1:x} + $0" -> "x + ". Good enough for display and
--- for clients without vim.snippet; nested placeholders keep their innermost default.
function M.snippet_to_text(s)
  local prev
  repeat
    prev = s
    s = s:gsub("%${%d+:([^{}]*)}", "%1")
  until s == prev
  s = s:gsub("%${%d+|([^,|]*)[^|]*|}", "%1")
  s = s:gsub("%${%d+}", "")
  s = s:gsub("%$%d+", "")
  s = s:gsub("\\([%$}\\])", "%1")
  return s
end

--- The insert text of an InlineCompletionItem as plain text (string or StringValue),
--- line breaks as "\n".
function M.item_text(item)
  local t = item.insertText
  if type(t) == "table" then
    t = t.kind == "snippet" and M.snippet_to_text(t.value or "") or (t.value or "")
  end
  if type(t) ~= "string" then
    return nil
  end
  return M.normalize_breaks(t)
end

--- Where a suggestion applies and what to draw.
--- `line`: the cursor's line; `cursor`: byte column; `start_col`: byte column where the
--- item's range starts on the same line (the cursor when the item has no range);
--- `end_col`: byte column where the range ends when that is on the cursor's line past the
--- cursor (nil otherwise): the text from the cursor to there is replaced by the accept.
--- Returns the ghost text (what follows the typed prefix), or nil when the item does not
--- fit what was typed (a stale suggestion) or adds nothing.
---
--- The replaced text stays drawn after the cursor until the accept, so a suggestion that
--- ends with it (a server replacing the closers it writes again: "(a, 0))" over the ")" of
--- "fired.append(|)") is drawn without that end: "(a, 0)", which reads as the line will
--- be. One that does not end with it is drawn whole, before it.
function M.ghost_text(text, line, start_col, cursor, end_col)
  if start_col > cursor then
    return nil
  end
  local typed = line:sub(start_col + 1, cursor)
  if text:sub(1, #typed) ~= typed then
    return nil
  end
  local rest = text:sub(#typed + 1)
  if end_col and end_col > cursor then
    local replaced = line:sub(cursor + 1, end_col)
    if #replaced <= #rest and rest:sub(#rest - #replaced + 1) == replaced then
      rest = rest:sub(1, #rest - #replaced)
    end
  end
  if rest == "" then
    return nil
  end
  return rest
end

--- Cursor after inserting `lines` at (row, col): {row, col}, 0-based row, byte col.
function M.end_of_insert(row, col, lines)
  if #lines == 1 then
    return row, col + #lines[1]
  end
  return row + #lines - 1, #lines[#lines]
end

return M
