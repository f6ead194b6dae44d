-- Prepared completions: when the cursor rests somewhere new in a buffer ngramd is attached
-- to, the server is told with ngramd.prepareCompletion [uri, position, version], and the
-- daemon prefills the completion prompt there in idle time; the first suggestion at that
-- place then prefills only what was typed since (a cold prefill is most of a completion's
-- cost on the CPU). A head start only: nothing waits on it and its reply is ignored.
--
-- "Rests": DELAY_MS without a cursor move or an edit (each restarts the wait), Normal,
-- Insert and Replace mode alike. Sent in no other mode: not in Visual/Select mode (a
-- selection is what a rewrite prepares), nor on the command line (e.g. while :NgramdRewrite
-- asks for its instruction: the user is typing that, not code).
-- Not sent after a scroll either: when the Normal-mode cursor move that started the wait
-- also changed the window's top line (<C-d>, <C-f>, <C-e>, the mouse wheel dragging the
-- cursor, a jump off screen), the user is reading, not about to type; the next move that
-- keeps the top line, or any Insert-mode move or edit, waits as usual. Nor twice in a row
-- for one (uri, version, position), nor where this plugin's own completion request was
-- just made (it warms the same cache).
local client_mod = require("ngramd.client")
local ghost = require("ngramd.ghost")
local text = require("ngramd.text")

local M = {}

M.DELAY_MS = 300
-- enabled: completions are on (:NgramdToggle); prepare_completions: the setup() option.
M.options = { enabled = true, prepare_completions = true }

local uv = vim.uv or vim.loop
-- bufnr -> { timer, waiting, generation, win, topline }, for every buffer attached (and not
-- detached since). One libuv timer per buffer, restarted on each move or edit (not one made
-- and closed per keystroke); `generation` tells a callback already scheduled by an earlier
-- start that it is stale.
local state = {}
-- The last prepare sent, "uri version line character": one for all buffers, since the
-- daemon's cache holds the last prompt prefilled, whichever buffer it came from.
local last_sent = nil

local function wanted()
  return M.options.enabled and M.options.prepare_completions
end

--- Stops the wait of `s` (its timer stays, for the next wait).
local function stop_wait(s)
  if s and s.timer then
    s.timer:stop()
  end
  if s then
    s.waiting = false
  end
end

--- Stops the wait of `s` and closes its timer (the buffer is detached).
local function close_timer(s)
  stop_wait(s)
  if s and s.timer then
    s.timer:close()
    s.timer = nil
  end
end

--- Sends ngramd.prepareCompletion for the cursor of `bufnr`, unless one of the rules above
--- says not to.
local function prepare_now(bufnr)
  if not wanted() or not vim.api.nvim_buf_is_valid(bufnr) or vim.api.nvim_get_current_buf() ~= bufnr then
    return
  end
  local mode = vim.api.nvim_get_mode().mode
  if not mode:match("^[niR]") or mode:match("^no") then -- Operator-pending is "no..."
    return
  end
  local client = client_mod.get(bufnr)
  if not client or not client.initialized then
    return
  end
  local cursor = vim.api.nvim_win_get_cursor(0)
  local row, col = cursor[1] - 1, cursor[2]
  if ghost.asked_at(bufnr, vim.api.nvim_buf_get_changedtick(bufnr), row, col) then
    return
  end
  local line = vim.api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ""
  local position = { line = row, character = text.lsp_col(line, col, client.offset_encoding or "utf-16") }
  local uri = vim.uri_from_bufnr(bufnr)
  local version = client_mod.version(bufnr)
  local key = table.concat({ uri, version == vim.NIL and "nil" or version, row, position.character }, " ")
  if key == last_sent then
    return
  end
  last_sent = key
  client_mod.request(client, "workspace/executeCommand", {
    command = "ngramd.prepareCompletion",
    arguments = { uri, position, version },
  }, function() end, bufnr)
end

--- Whether the window's top line differs from the one `s` saw last (in the same window),
--- and remembers the current one.
local function scrolled(s)
  local win, topline = vim.api.nvim_get_current_win(), vim.fn.line("w0")
  local moved = s.win == win and s.topline ~= topline
  s.win, s.topline = win, topline
  return moved
end

--- (Re)starts the wait of `bufnr`: called on every cursor move and edit. `normal_move`:
--- the call is for a Normal-mode cursor move (CursorMoved), which waits for nothing when
--- it scrolled the window.
function M.schedule(bufnr, normal_move)
  local s = state[bufnr] or {}
  state[bufnr] = s
  stop_wait(s)
  local scroll = scrolled(s) -- kept up to date on every call, so that only this move counts
  if not wanted() or (normal_move and scroll) then
    return
  end
  s.timer = s.timer or uv.new_timer()
  s.generation = (s.generation or 0) + 1
  s.waiting = true
  local generation = s.generation
  s.timer:start(M.DELAY_MS, 0, vim.schedule_wrap(function()
    if s.waiting and s.generation == generation then -- else restarted or stopped since
      s.waiting = false
      prepare_now(bufnr)
    end
  end))
end

--- Stops the wait of `bufnr` (the buffer stays attached): a rewrite about to ask for its
--- instruction prepares its own prompt; a completion's prepare meanwhile would only cost CPU
--- and a cache slot of the daemon.
function M.cancel(bufnr)
  stop_wait(state[bufnr])
end

--- Whether a prepare waits for the cursor of `bufnr` to rest.
function M.pending(bufnr)
  return state[bufnr] ~= nil and state[bufnr].waiting == true
end

--- Stops the wait of `bufnr` and removes its autocommands.
function M.detach(bufnr)
  close_timer(state[bufnr])
  state[bufnr] = nil
  pcall(vim.api.nvim_del_augroup_by_name, "ngramd_prepare_" .. bufnr)
end

--- Detaches the buffers no ngramd client serves any more (after a client exits: Neovim
--- 0.7 has no LspDetach).
function M.detach_unserved()
  for bufnr in pairs(state) do
    if not vim.api.nvim_buf_is_valid(bufnr) or not client_mod.get(bufnr) then
      M.detach(bufnr)
    end
  end
end

--- Autocommands of one buffer the ngramd client attached to.
function M.attach(bufnr)
  state[bufnr] = state[bufnr] or {}
  local group = vim.api.nvim_create_augroup("ngramd_prepare_" .. bufnr, { clear = true })
  local function on(events, callback)
    vim.api.nvim_create_autocmd(events, { group = group, buffer = bufnr, callback = callback })
  end
  on({ "CursorMoved", "CursorMovedI", "TextChanged", "TextChangedI" }, function(args)
    M.schedule(bufnr, args.event == "CursorMoved")
  end)
  on({ "BufUnload", "BufDelete" }, function()
    M.detach(bufnr)
  end)
  if vim.fn.exists("##LspDetach") == 1 then -- Neovim 0.8+
    on("LspDetach", function(args)
      local client = args.data and vim.lsp.get_client_by_id(args.data.client_id)
      if not client or client.name == client_mod.NAME then
        M.detach(bufnr)
      end
    end)
  end
end

return M
