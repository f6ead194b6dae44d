-- Inline completion for Neovim < 0.12 (and for native = false): requests
-- textDocument/inlineCompletion on a debounce while typing, draws the suggestion as
-- ghost text with an extmark (virt_text for its first line, virt_lines for the rest),
-- and inserts it on accept.
--
-- A response is shown only if the buffer and the cursor are still where they were when it
-- was requested (same changedtick, same position, still in Insert mode): a stale
-- suggestion is never drawn. A new keystroke cancels the request in flight.
local text = require("ngramd.text")
local client_mod = require("ngramd.client")

local M = {}

local ns = vim.api.nvim_create_namespace("ngramd_ghost")
M.namespace = ns

local TRIGGER_INVOKED, TRIGGER_AUTOMATIC = 1, 2
-- 0.7-0.9 cannot insert virtual text mid-line.
local INLINE_VIRT_TEXT = client_mod.has("0.10")

-- bufnr -> { timer, request = {client, id}, items, index, extmark, row, col, tick,
--           asked = {tick, row, col}: the last request not cancelled (answered or in flight) }
local state = {}
local uv = vim.uv or vim.loop

M.options = { debounce_ms = 75, highlight = "NgramdGhost", enabled = true }

local function st(bufnr)
  local s = state[bufnr]
  if not s then
    s = {}
    state[bufnr] = s
  end
  return s
end

local function stop_timer(s)
  if s.timer then
    s.timer:stop()
    s.timer:close()
    s.timer = nil
  end
end

local function cancel_request(s)
  if s.request then
    pcall(client_mod.cancel, s.request.client, s.request.id)
    s.request = nil
    s.asked = nil
  end
end

local function clear_mark(bufnr, s)
  if s.extmark then
    pcall(vim.api.nvim_buf_del_extmark, bufnr, ns, s.extmark)
    s.extmark = nil
  end
end

--- Removes the ghost text and forgets the suggestions; cancels pending work.
function M.dismiss(bufnr)
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  local s = state[bufnr]
  if not s then
    return
  end
  stop_timer(s)
  cancel_request(s)
  clear_mark(bufnr, s)
  s.items, s.index = nil, nil
end

local function cursor()
  local pos = vim.api.nvim_win_get_cursor(0)
  return pos[1] - 1, pos[2]
end

local function line_at(bufnr, row)
  return vim.api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ""
end

-- Byte range {srow, scol, erow, ecol} of an item, the cursor when it has none.
local function item_range(bufnr, item, encoding, row, col)
  if not item.range then
    return row, col, row, col
  end
  local s, e = item.range.start, item.range["end"]
  local scol = text.byte_col(line_at(bufnr, s.line), s.character, encoding)
  local ecol = text.byte_col(line_at(bufnr, e.line), e.character, encoding)
  return s.line, scol, e.line, ecol
end

--- Draws item `index` of the current suggestions; false if it does not fit the buffer.
local function render(bufnr, s, index)
  clear_mark(bufnr, s)
  local item = s.items and s.items[index]
  if not item then
    return false
  end
  local row, col = cursor()
  local srow, scol, erow, ecol = item_range(bufnr, item, s.encoding, row, col)
  if srow ~= row then
    return false
  end
  local body = text.item_text(item)
  if not body then
    return false
  end
  local line = line_at(bufnr, row)
  -- a range that ends past the cursor on its line replaces text drawn after the ghost text
  local replaced_end = (erow == row and ecol > col) and ecol or nil
  local ghost = text.ghost_text(body, line, scol, col, replaced_end)
  if not ghost then
    return false
  end
  local lines = text.split_lines(ghost)
  local hl = M.options.highlight
  local pos
  if INLINE_VIRT_TEXT then
    pos = "inline"
  elseif col >= #line then
    pos = "overlay"
  else
    pos = "eol" -- no inline virtual text: show it after the line
  end
  local opts = { virt_text = { { lines[1], hl } }, virt_text_pos = pos, hl_mode = "combine" }
  if #lines > 1 then
    local virt_lines = {}
    for i = 2, #lines do
      virt_lines[#virt_lines + 1] = { { lines[i], hl } }
    end
    opts.virt_lines = virt_lines
  end
  s.extmark = vim.api.nvim_buf_set_extmark(bufnr, ns, row, col, opts)
  s.index = index
  s.row, s.col, s.tick = row, col, vim.api.nvim_buf_get_changedtick(bufnr)
  s.shown = ghost
  return true
end

--- Sends textDocument/inlineCompletion for the cursor now; the reply is drawn if still
--- current. `trigger`: 1 invoked (a key), 2 automatic (typing).
function M.request(bufnr, trigger)
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  local s = st(bufnr)
  stop_timer(s)
  cancel_request(s)
  clear_mark(bufnr, s)
  s.items = nil
  if not M.options.enabled then
    return false
  end
  local client = client_mod.get(bufnr)
  if not client or not client.initialized then
    return false
  end
  local row, col = cursor()
  local encoding = client.offset_encoding or "utf-16"
  local params = {
    textDocument = { uri = vim.uri_from_bufnr(bufnr) },
    position = { line = row, character = text.lsp_col(line_at(bufnr, row), col, encoding) },
    context = { triggerKind = trigger or TRIGGER_AUTOMATIC },
  }
  local tick = vim.api.nvim_buf_get_changedtick(bufnr)
  local request
  local ok, id = client_mod.request(client, "textDocument/inlineCompletion", params, function(err, result)
    if s.request ~= request then
      return -- superseded
    end
    s.request = nil
    if err then
      s.last_error = err.message or vim.inspect(err)
      return
    end
    if vim.api.nvim_get_current_buf() ~= bufnr or vim.api.nvim_buf_get_changedtick(bufnr) ~= tick then
      return
    end
    local r, c = cursor()
    if r ~= row or c ~= col or M.require_insert and not M.insert_like(M.mode()) then
      return
    end
    local items = result and (result.items or result) or {}
    if type(items) ~= "table" or #items == 0 then
      clear_mark(bufnr, s)
      s.items = nil
      return
    end
    s.items, s.encoding, s.client_id = items, encoding, client.id
    for i = 1, #items do
      if render(bufnr, s, i) then
        return
      end
    end
    s.items = nil
  end, bufnr)
  if ok then
    request = { client = client, id = id }
    s.request = request
    s.asked = { tick = tick, row = row, col = col }
  end
  return ok
end

--- Whether a completion request was made in `bufnr` at changedtick `tick` and byte
--- position (row, col), 0-based, and not cancelled: the server's cache is warm there.
function M.asked_at(bufnr, tick, row, col)
  local s = state[bufnr]
  local a = s and s.asked
  return a ~= nil and a.tick == tick and a.row == row and a.col == col
end

--- Schedules a request after the debounce; called on every keystroke in Insert mode.
function M.on_change(bufnr)
  local s = st(bufnr)
  -- The ghost text is valid only at the position and text it was drawn for.
  if s.extmark then
    local row, col = cursor()
    if row ~= s.row or col ~= s.col or vim.api.nvim_buf_get_changedtick(bufnr) ~= s.tick then
      clear_mark(bufnr, s)
      s.items = nil
    else
      return
    end
  end
  if not M.options.enabled then
    return
  end
  stop_timer(s)
  cancel_request(s)
  if M.require_insert and not M.insert_like(M.mode()) then -- Virtual Replace: no suggestion
    return
  end
  local timer = uv.new_timer()
  s.timer = timer
  timer:start(M.options.debounce_ms, 0, vim.schedule_wrap(function()
    if s.timer == timer then
      stop_timer(s)
      if vim.api.nvim_buf_is_valid(bufnr) and vim.api.nvim_get_current_buf() == bufnr then
        M.request(bufnr, TRIGGER_AUTOMATIC)
      end
    end
  end))
end

--- The error message of the last failed request, or nil.
function M.last_error(bufnr)
  local s = state[bufnr or vim.api.nvim_get_current_buf()]
  return s and s.last_error or nil
end

--- Is a request in flight for `bufnr`?
function M.pending(bufnr)
  local s = state[bufnr or vim.api.nvim_get_current_buf()]
  return s ~= nil and s.request ~= nil
end

--- Is a suggestion drawn in `bufnr`?
function M.visible(bufnr)
  local s = state[bufnr or vim.api.nvim_get_current_buf()]
  return s ~= nil and s.extmark ~= nil
end

--- What is drawn: the ghost text (string) or nil.
function M.shown(bufnr)
  local s = state[bufnr or vim.api.nvim_get_current_buf()]
  return s and s.extmark and s.shown or nil
end

--- Shows the next (delta 1) or previous (-1) suggestion that fits.
function M.cycle(bufnr, delta)
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  local s = state[bufnr]
  if not s or not s.items or not s.index then
    return false
  end
  local n = #s.items
  for step = 1, n do
    local i = (s.index - 1 + delta * step) % n + 1
    if render(bufnr, s, i) then
      return true
    end
  end
  return false
end

-- Replace mode's own <BS> only restores characters this Replace session overwrote; over
-- text it did not type (an accepted suggestion) it merely moves left. Right after an
-- accept in Replace mode, <BS> deletes the accepted text instead, a character at a time
-- as in Insert mode: a buffer-local <BS> mapping lives exactly as long as the cursor stays
-- at the end of the (shrinking) accepted text with nothing else changed.
-- bufnr -> { srow, scol, erow, ecol, tick }: the accepted text's start and end (0-based
-- byte positions; the cursor is at the end) and the changedtick that goes with them.
local accepted = {}

--- Forgets the Replace-mode accept of `bufnr`; <BS> is Neovim's (or the user's) again.
local function forget_accepted(bufnr)
  if accepted[bufnr] then
    accepted[bufnr] = nil
    pcall(vim.keymap.del, "i", "<BS>", { buffer = bufnr })
  end
end

--- Is the cursor still at the end of the text accepted in Replace mode, nothing else changed?
local function at_accepted_end(bufnr)
  local a = accepted[bufnr]
  if not a or vim.api.nvim_get_current_buf() ~= bufnr or not M.is_replace(M.mode()) then
    return false
  end
  local row, col = cursor()
  return row == a.erow and col == a.ecol and vim.api.nvim_buf_get_changedtick(bufnr) == a.tick
end

local function can_backspace_eol()
  local bs = vim.o.backspace
  return bs:find("eol", 1, true) ~= nil or bs == "2" or bs == "3"
end

--- The keys for <BS> while an accept is remembered (an expr mapping's value).
function M.backspace_keys(bufnr)
  if at_accepted_end(bufnr) then
    return "<Cmd>lua require('ngramd.ghost').backspace_accepted(" .. bufnr .. ")<CR>"
  end
  return "<BS>"
end

--- Deletes the character before the cursor, which belongs to the text accepted in Replace
--- mode (the line break before it at the start of a line, where 'backspace' allows "eol").
function M.backspace_accepted(bufnr)
  local a = accepted[bufnr]
  if not at_accepted_end(bufnr) then
    return forget_accepted(bufnr)
  end
  local row, col = a.erow, a.ecol
  if col > 0 then
    local line = line_at(bufnr, row)
    col = col - 1 + vim.str_utf_start(line, col) -- the start of the character before the cursor
  elseif can_backspace_eol() then
    row = row - 1
    col = #line_at(bufnr, row)
  else
    return forget_accepted(bufnr)
  end
  vim.api.nvim_buf_set_text(bufnr, row, col, a.erow, a.ecol, { "" })
  vim.api.nvim_win_set_cursor(0, { row + 1, col })
  a.erow, a.ecol, a.tick = row, col, vim.api.nvim_buf_get_changedtick(bufnr)
  if row == a.srow and col <= a.scol then
    forget_accepted(bufnr) -- all of it deleted: further <BS> is Replace mode's own
  end
end

--- Remembers text just accepted in Replace mode, from (srow, scol) to the cursor.
local function remember_accepted(bufnr, srow, scol)
  forget_accepted(bufnr)
  local erow, ecol = cursor()
  if erow < srow or erow == srow and ecol <= scol then
    return
  end
  local map = vim.fn.maparg("<BS>", "i", false, true)
  if map.buffer == 1 then
    return -- the buffer's own <BS> mapping (e.g. an autopairs plugin's) is left alone
  end
  accepted[bufnr] = { srow = srow, scol = scol, erow = erow, ecol = ecol, tick = vim.api.nvim_buf_get_changedtick(bufnr) }
  vim.keymap.set("i", "<BS>", function()
    return M.backspace_keys(bufnr)
  end, { buffer = bufnr, expr = true, silent = true, desc = "ngramd: <BS> deletes the accepted suggestion" })
end

--- Inserts the drawn suggestion, replacing the item's range; returns true if it did.
function M.accept(bufnr)
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  local s = state[bufnr]
  if not s or not s.extmark or not s.items then
    return false
  end
  local item = s.items[s.index]
  local row, col = cursor()
  local srow, scol, erow, ecol = item_range(bufnr, item, s.encoding, row, col)
  local body = text.item_text(item)
  M.dismiss(bufnr)
  local lines = text.split_lines(body)
  vim.api.nvim_buf_set_text(bufnr, srow, scol, erow, ecol, lines)
  local crow, ccol = text.end_of_insert(srow, scol, lines)
  vim.api.nvim_win_set_cursor(0, { crow + 1, ccol })
  if M.is_replace(M.mode()) then
    remember_accepted(bufnr, row, col) -- the text after the cursor it was accepted at
  end
  if item.command then
    local client = vim.lsp.get_client_by_id(s.client_id)
    if client then
      client_mod.request(client, "workspace/executeCommand",
        { command = item.command.command, arguments = item.command.arguments }, function() end, bufnr)
    end
  end
  return true
end

--- The current mode in full ("Rv" for Virtual Replace, where vim.fn.mode() says "R").
function M.mode()
  return vim.api.nvim_get_mode().mode
end

--- Replace mode (not Virtual Replace), `mode` in full: "R", or "Rc"/"Rx" (its completion submodes).
function M.is_replace(mode)
  return mode:sub(1, 1) == "R" and mode:sub(2, 2) ~= "v"
end

--- Modes in which suggestions are drawn and accepted, `mode` in full: Insert and Replace
--- ("R": accepting inserts the suggestion before the text after the cursor, it overwrites
--- nothing); not Virtual Replace ("Rv": it replaces screen cells, which an inserted line break
--- or tab would not respect).
function M.insert_like(mode)
  return mode:sub(1, 1) == "i" or M.is_replace(mode)
end

--- Autocommands of one buffer.
function M.attach(bufnr)
  local group = vim.api.nvim_create_augroup("ngramd_ghost_" .. bufnr, { clear = true })
  local function on(events, callback)
    vim.api.nvim_create_autocmd(events, { group = group, buffer = bufnr, callback = callback })
  end
  on({ "TextChangedI", "CursorMovedI" }, function()
    if not at_accepted_end(bufnr) then
      forget_accepted(bufnr)
    end
    M.on_change(bufnr)
  end)
  -- The extmark shows in every window on the buffer: leaving the window clears it
  -- (WinLeave), and so does any way out of Insert/Replace mode, <C-c> and <C-o> included,
  -- which do not all fire InsertLeave (ModeChanged does).
  on({ "InsertLeave", "BufLeave", "WinLeave" }, function()
    M.dismiss(bufnr)
    forget_accepted(bufnr)
  end)
  on("ModeChanged", function()
    local new = vim.v.event and vim.v.event.new_mode or M.mode()
    if not M.insert_like(new) then
      M.dismiss(bufnr)
    end
    if not M.is_replace(new) then
      forget_accepted(bufnr)
    end
  end)
  on("BufUnload", function()
    M.dismiss(bufnr)
    forget_accepted(bufnr)
    state[bufnr] = nil
    pcall(vim.api.nvim_del_augroup_by_id, group)
  end)
end

-- Responses are drawn only in Insert mode; tests that drive the functions directly turn
-- this off.
M.require_insert = true

return M
