-- ngramd for Neovim: inline code completions from a local model through `ngramd lsp`.
--
--   require("ngramd").setup{ cmd = {...}, filetypes = {...}, max_tokens = 64,
--                            debounce_ms = 75, keymaps = {...}, prepare_completions = true }
--
-- On Neovim >= 0.12 the built-in vim.lsp.inline_completion draws the suggestions; on
-- older versions (0.7 and up) ngramd.ghost does: it requests
-- textDocument/inlineCompletion itself and draws extmarks. On every version
-- ngramd.prepare asks the server to prefill the completion prompt where the cursor rests.
-- Commands: :NgramdStatus, :NgramdToggle, :[range]NgramdRewrite [instruction].
local config = require("ngramd.config")
local client_mod = require("ngramd.client")
local ghost = require("ngramd.ghost")
local instruction_mod = require("ngramd.instruction")
local prepare = require("ngramd.prepare")
local text = require("ngramd.text")

local M = {}

M.config = nil
M.last_status = nil

-- A rewrite's edit is applied once: `ngramd lsp` sends it with workspace/applyEdit and
-- also returns it, another server may only return it. While rewrites are in flight, the
-- edits received through workspace/applyEdit are counted by content (vim.inspect sorts
-- keys), so that each rewrite checks for its own edit: overlapping rewrites cannot
-- mistake one another's applyEdit for theirs.
local rewrites_in_flight = 0
local applied_edits = {} -- vim.inspect(edit) -> applyEdit requests not yet matched
-- client id -> { [finish] = true }: the rewrites waiting for that client's reply. A client
-- that exits mid-request never calls their handlers (Neovim 0.7's rpc drops them), so
-- its exit finishes them: they fail, and stop counting as in flight.
local rewrites_waiting = {}

-- Where each buffer's last Visual selection was left (ModeChanged out of Visual mode),
-- bufnr -> { tick = changedtick, cursor = {row, col} }. The marks '< '> are the
-- selection the user means only while the buffer and the cursor are still as that
-- selection left them (`v...:` and `v...<Esc>:'<,'>` keep both); Neovim 0.7 does not
-- say whether a command's range was typed as '<,'>, and the marks stay set for ever.
local visual_left = {}

-- bufnr -> what ngramd.client.before_rename returned, from BufFilePre to BufFilePost
local renaming = {}

local function remember_visual_exit(bufnr)
  visual_left[bufnr] = {
    tick = vim.api.nvim_buf_get_changedtick(bufnr),
    cursor = vim.api.nvim_win_get_cursor(0),
  }
end

--- Whether '< '> are a selection left just now in `bufnr`: nothing changed and the
--- cursor did not move since Visual mode ended.
local function visual_just_left(bufnr)
  local left = visual_left[bufnr]
  if not left or vim.api.nvim_get_current_buf() ~= bufnr then
    return false
  end
  local cursor = vim.api.nvim_win_get_cursor(0)
  return left.tick == vim.api.nvim_buf_get_changedtick(bufnr)
    and left.cursor[1] == cursor[1] and left.cursor[2] == cursor[2]
end

local function on_apply_edit(err, result, ctx, cfg)
  if rewrites_in_flight > 0 and type(result) == "table" and result.edit ~= nil then
    local key = vim.inspect(result.edit)
    applied_edits[key] = (applied_edits[key] or 0) + 1
  end
  return vim.lsp.handlers["workspace/applyEdit"](err, result, ctx, cfg)
end

--- Whether the server already sent `edit` with workspace/applyEdit (that request is
--- then matched, so that an identical later rewrite is not taken for applied).
local function take_applied(edit)
  local key = vim.inspect(edit)
  local n = applied_edits[key] or 0
  if n > 0 then
    applied_edits[key] = n > 1 and n - 1 or nil
    return true
  end
  return false
end

local function notify(msg, level)
  vim.notify("ngramd: " .. msg, level or vim.log.levels.INFO)
end

--- The client's on_exit (a libuv callback on 0.7: the work is scheduled).
local stopping = {} -- client ids stopped on purpose (:NgramdRestart): their exit is expected

local function on_client_exit(code, signal, client_id)
  vim.schedule(function()
    prepare.detach_unserved()
    local waiting = rewrites_waiting[client_id] or {}
    rewrites_waiting[client_id] = nil
    for finish in pairs(waiting) do
      finish({ message = "the ngramd language server exited before answering" }, nil)
    end
    local expected = stopping[client_id]
    stopping[client_id] = nil
    if not expected and (code ~= 0 or (signal or 0) ~= 0) then -- a crash, a kill: say how to get it back
      notify(string.format("the language server exited (code %s, signal %s); :NgramdRestart starts it again",
        tostring(code), tostring(signal)), vim.log.levels.WARN)
    end
  end)
end

local function set_keymaps(bufnr, native)
  local keys = M.config.keymaps
  if not keys then
    return
  end
  local function map(lhs, rhs, desc, expr)
    if lhs and lhs ~= "" then
      vim.keymap.set("i", lhs, rhs, { buffer = bufnr, desc = "ngramd: " .. desc, expr = expr, silent = true })
    end
  end
  map(keys.next, M.next, "next suggestion")
  map(keys.prev, M.prev, "previous suggestion")
  if native then
    map(keys.accept, function()
      if not vim.lsp.inline_completion.get({ bufnr = bufnr }) then
        vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes(keys.accept, true, false, true), "n", false)
      end
    end, "accept suggestion")
    map(keys.trigger, M.suggest, "request a suggestion")
    return
  end
  local accept_key = keys.accept
  map(accept_key, function()
    if ghost.visible(bufnr) then
      return "<Cmd>lua require('ngramd').accept()<CR>"
    end
    return accept_key
  end, "accept suggestion", true)
  map(keys.dismiss, M.dismiss, "dismiss suggestion")
  map(keys.trigger, M.suggest, "request a suggestion")
end

local function capabilities(native)
  local caps = vim.lsp.protocol.make_client_capabilities()
  if not native then
    -- Older clients do not announce inline completion; this plugin handles it.
    caps.textDocument = caps.textDocument or {}
    caps.textDocument.inlineCompletion = { dynamicRegistration = false }
  end
  return caps
end

local function on_attach(client, bufnr)
  if M.native then
    -- The built-in's switch is per buffer (shared by every server in it) and per client:
    -- ngramd's client follows the toggle; the buffer's is turned on while ngramd is on (as any
    -- server of the buffer needs it), never off.
    if M.config.enabled then
      vim.lsp.inline_completion.enable(true, { bufnr = bufnr })
    end
    vim.lsp.inline_completion.enable(M.config.enabled, { client_id = client.id })
  else
    ghost.attach(bufnr)
  end
  prepare.attach(bufnr)
  set_keymaps(bufnr, M.native)
end

--- Starts (or reuses) the ngramd client for `bufnr`; returns the client id or nil.
function M.start(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  if not M.config then
    M.setup({})
  end
  local existing = client_mod.get(bufnr)
  if existing then
    return existing.id
  end
  if vim.api.nvim_buf_get_name(bufnr) == "" then
    -- no file name: its URI would be "file://", the same for every such buffer (one document to the server)
    return nil
  end
  local root = client_mod.root_dir(vim.api.nvim_buf_get_name(bufnr), M.config.root_markers)
  local cmd, err = config.server_cmd(M.config, root)
  if not cmd then
    if not M._warned then
      M._warned = true
      notify(err, vim.log.levels.WARN)
    end
    return nil
  end
  local id, start_err = client_mod.start(bufnr, {
    name = client_mod.NAME,
    cmd = cmd,
    root_dir = root,
    init_options = M.init_options(),
    capabilities = capabilities(M.native),
    on_attach = on_attach,
    on_exit = on_client_exit,
    handlers = { ["workspace/applyEdit"] = on_apply_edit },
    flags = { debounce_text_changes = 0 }, -- sync every keystroke: completions need the latest text
  })
  if not id then
    notify(start_err, vim.log.levels.ERROR)
  end
  return id
end

--- The options sent to the server; the fallback path debounces itself, so the server
--- is asked not to wait a second time.
function M.init_options()
  return config.init_options(M.config, (not M.native) and 0 or nil)
end

--- Sends the current options to every ngramd client.
local function push_config()
  local settings = { ngramd = M.init_options() }
  for _, c in ipairs(client_mod.all()) do
    client_mod.notify(c, "workspace/didChangeConfiguration", { settings = settings })
  end
end

-- The `enabled` apply_enabled last applied (nil before the first setup()).
local applied_enabled = nil

--- Turns suggestions on or off in the plugin and, on the native path, in the built-in
--- module for ngramd's running clients (not the server: push_config tells it).
local function apply_enabled(enabled)
  local switched_on = enabled and applied_enabled == false
  applied_enabled = enabled
  ghost.options.enabled = enabled
  prepare.options.enabled = enabled
  if not enabled then
    for _, b in ipairs(vim.api.nvim_list_bufs()) do
      ghost.dismiss(b)
    end
  end
  if M.native then
    for _, c in ipairs(client_mod.all()) do -- ngramd's clients only: not another server's inline completion
      -- Its buffers' switches on too (one attached while ngramd was off left them), but only
      -- when ngramd goes from off to on: a buffer's switch is every server's there (the
      -- built-in has no switch per client and buffer), and setup() again, or a toggle to on
      -- while on, must not turn back on a buffer the user turned off.
      if switched_on then
        for b in pairs(c.attached_buffers or {}) do
          vim.lsp.inline_completion.enable(true, { bufnr = b })
        end
      end
      vim.lsp.inline_completion.enable(enabled, { client_id = c.id })
    end
  end
end

local function filetype_enabled(ft)
  if M.config.filetypes == "*" then
    return ft ~= ""
  end
  for _, f in ipairs(M.config.filetypes) do
    if f == ft then
      return true
    end
  end
  return false
end

function M.setup(opts)
  M.config = config.resolve(opts)
  M.native = config.use_native(M.config)
  ghost.options.debounce_ms = M.config.debounce_ms
  ghost.options.highlight = M.config.highlight
  prepare.options.prepare_completions = M.config.prepare_completions
  -- setup() again: clients already attached take `enabled` now (on_attach sets it only for new ones)
  apply_enabled(M.config.enabled)
  vim.cmd("highlight default link NgramdGhost Comment")
  -- setup() again (a changed option): servers already running take the new settings
  -- (a new `cmd` or socket needs :NgramdRestart)
  push_config()

  local group = vim.api.nvim_create_augroup("ngramd", { clear = true })
  vim.api.nvim_create_autocmd("FileType", {
    group = group,
    pattern = "*",
    callback = function(args)
      if filetype_enabled(args.match) and vim.bo[args.buf].buftype == "" then
        M.start(args.buf)
      end
    end,
  })

  local function serve(bufnr)
    if vim.api.nvim_buf_is_valid(bufnr) and filetype_enabled(vim.bo[bufnr].filetype) and vim.bo[bufnr].buftype == "" then
      M.start(bufnr)
    end
  end
  -- A rename (`:file name`, `:saveas`): the server closes the old URI and opens the new
  -- one (ngramd.client.before_rename).
  vim.api.nvim_create_autocmd("BufFilePre", {
    group = group,
    pattern = "*",
    callback = function(args)
      local before = client_mod.before_rename(args.buf)
      renaming[args.buf] = before
      if before then
        vim.schedule(function() -- no BufFilePost (E95: the name is another buffer's): served as before
          if renaming[args.buf] == before then
            renaming[args.buf] = nil
            serve(args.buf)
          end
        end)
      end
    end,
  })
  vim.api.nvim_create_autocmd("BufFilePost", { -- renamed, or named at last (`:w name`, `:file name`)
    group = group,
    pattern = "*",
    callback = function(args)
      local before = renaming[args.buf]
      renaming[args.buf] = nil
      if before then
        client_mod.after_rename(args.buf, before)
      end
      serve(args.buf)
    end,
  })

  vim.api.nvim_create_autocmd("ModeChanged", {
    group = group,
    pattern = "*",
    callback = function(args)
      local old = vim.v.event and vim.v.event.old_mode or ""
      if old:match("^[vV\22]") then -- Visual (charwise, linewise, blockwise) left
        remember_visual_exit(args.buf)
      end
    end,
  })
  vim.api.nvim_create_autocmd("BufWipeout", {
    group = group,
    pattern = "*",
    callback = function(args)
      visual_left[args.buf] = nil -- else the table keeps an entry for every buffer ever wiped
    end,
  })

  vim.api.nvim_create_user_command("NgramdStatus", function()
    M.status(function(err, result)
      if err then
        notify("status failed: " .. (err.message or vim.inspect(err)), vim.log.levels.ERROR)
      else
        notify(M.format_status(result) .. "\n" .. vim.inspect(result))
      end
    end)
  end, { desc = "ngramd: show the daemon's state and acceptance figures" })
  vim.api.nvim_create_user_command("NgramdToggle", function()
    M.toggle()
    notify(M.config.enabled and "completions on" or "completions off")
  end, { desc = "ngramd: turn inline completions on or off" })
  vim.api.nvim_create_user_command("NgramdRestart", function()
    M.restart()
  end, { desc = "ngramd: start the language server again" })
  vim.api.nvim_create_user_command("NgramdRewrite", function(args)
    local bufnr = vim.api.nvim_get_current_buf()
    -- a two-address range from the selection just left (:'<,'>): its columns count
    local line1, line2, visual = args.line1, args.line2, args.range == 2 and visual_just_left(bufnr)
    if args.range == 0 and vim.fn.mode():match("^[vV\22]") then
      -- From Visual mode by a <Cmd> mapping, which gives no range: end Visual mode (that
      -- sets '< and '>) and rewrite the selection, as :'<,'> would.
      vim.cmd("normal! \27")
      line1, line2 = vim.api.nvim_buf_get_mark(bufnr, "<")[1], vim.api.nvim_buf_get_mark(bufnr, ">")[1]
      visual = true
    end
    M.rewrite({
      line1 = line1,
      line2 = line2,
      visual = visual,
      instruction = args.args ~= "" and args.args or nil,
    })
  end, { range = true, nargs = "*", desc = "ngramd: rewrite the selected lines following an instruction" })

  -- Buffers already open when setup runs.
  for _, b in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(b) and filetype_enabled(vim.bo[b].filetype) and vim.bo[b].buftype == "" then
      M.start(b)
    end
  end
  return M
end

-- Suggestions (fallback path; on the native path these call the built-in module).

--- Asks for a suggestion at the cursor now; false where suggestions are off for the buffer.
function M.suggest()
  if M.native then
    -- The built-in module has no public "request now" (its `get` accepts): it requests,
    -- debounced, on CursorMovedI in the buffers where it is enabled, so fire that, for its
    -- own autocommand group where it has the name 0.12 gives it (else for the buffer's).
    local bufnr = vim.api.nvim_get_current_buf()
    local insert = vim.api.nvim_get_mode().mode:match("^[iR]") ~= nil -- it suggests there only
    local client = client_mod.get(bufnr)
    if not insert or not client
      or not vim.lsp.inline_completion.is_enabled({ bufnr = bufnr, client_id = client.id }) then
      return false
    end
    local event = { buffer = bufnr, modeline = false, group = "nvim.lsp.inline_completion:" .. bufnr }
    if not pcall(vim.api.nvim_exec_autocmds, "CursorMovedI", event) then
      event.group = nil
      vim.api.nvim_exec_autocmds("CursorMovedI", event)
    end
    return true
  end
  return ghost.request(vim.api.nvim_get_current_buf(), 1)
end

function M.accept()
  if M.native then
    return vim.lsp.inline_completion.get()
  end
  return ghost.accept()
end

-- The built-in module's cycling function (`select`, or `jump` where it has that name).
local function native_select(count)
  local ic = vim.lsp.inline_completion
  return (ic.select or ic.jump)({ count = count })
end

function M.next()
  if M.native then
    return native_select(1)
  end
  return ghost.cycle(nil, 1)
end

function M.prev()
  if M.native then
    return native_select(-1)
  end
  return ghost.cycle(nil, -1)
end

function M.dismiss()
  if not M.native then
    ghost.dismiss()
  end
end

-- Commands.

--- Starts the language server again for every loaded buffer it serves (after it exited, or
--- to run a new `cmd`); running ngramd clients are stopped first.
function M.restart()
  for _, c in ipairs(client_mod.all()) do
    stopping[c.id] = true
    client_mod.stop(c)
  end
  local function start_all()
    for _, b in ipairs(vim.api.nvim_list_bufs()) do
      if vim.api.nvim_buf_is_loaded(b) and filetype_enabled(vim.bo[b].filetype) and vim.bo[b].buftype == "" then
        M.start(b)
      end
    end
  end
  -- vim.lsp.start would reuse a client still stopping: wait (at most 3 s) for them to go
  local deadline = vim.loop.now() + 3000
  local function when_stopped()
    if #client_mod.all() == 0 or vim.loop.now() > deadline then
      start_all()
    else
      vim.defer_fn(when_stopped, 50)
    end
  end
  when_stopped()
end

--- Turns completions on or off (all buffers); the server is told through
--- workspace/didChangeConfiguration (enabled).
function M.toggle(enabled)
  if enabled == nil then
    enabled = not M.config.enabled
  end
  M.config.enabled = enabled
  apply_enabled(enabled)
  push_config()
  return enabled
end

--- ngramd.status; `callback(err, result)`.
function M.status(callback)
  client_mod.execute(0, "ngramd.status", {}, function(err, result)
    if not err then
      M.last_status = result
    end
    if callback then
      callback(err, result)
    end
  end)
end

-- The status reply of `ngramd lsp` (lsp/server.py status):
--   { enabled, settings, socket, connected, lastError, counters,
--     daemon = <the daemon's status (docs/rpc.md)> or { error = ... } }
-- with daemon.generation = { drafted, accepted, acceptance, ... } and daemon.model.name.

--- Share of drafted tokens the model accepted, or nil before anything was drafted.
local function acceptance(result)
  if type(result) ~= "table" then
    return nil
  end
  local daemon = type(result.daemon) == "table" and result.daemon or {}
  local scopes = { result, result.generation, daemon.generation, daemon, result.stats }
  for i = 1, 5 do
    local s = scopes[i]
    if type(s) == "table" then
      local d, a = s.drafted, s.accepted
      if type(d) == "number" and type(a) == "number" then
        return d > 0 and a / d or nil
      end
      local rate = s.acceptance_rate or s.acceptanceRate
      if type(rate) == "number" then
        return rate
      end
    end
  end
  return nil
end
M.acceptance = acceptance

--- "running", "down" or "unknown".
local function daemon_state(result)
  if type(result) ~= "table" then
    return "unknown"
  end
  if type(result.daemon) == "table" and result.daemon.error then
    return "down"
  end
  if result.connected == true then
    return "running"
  elseif result.connected == false then
    return "down"
  end
  return "unknown"
end

--- One line: "daemon running, completions on, model X, acceptance 73%".
function M.format_status(result)
  local parts = { "daemon " .. daemon_state(result), M.config.enabled and "completions on" or "completions off" }
  local model = type(result) == "table" and type(result.daemon) == "table" and type(result.daemon.model) == "table"
    and result.daemon.model.name
  if type(model) == "string" then
    parts[#parts + 1] = "model " .. model
  end
  local rate = acceptance(result)
  if rate then
    parts[#parts + 1] = string.format("acceptance %d%%", math.floor(rate * 100 + 0.5))
  end
  return table.concat(parts, ", ")
end

--- For a statusline: the last status fetched, short ("ngramd 73%"), or "".
function M.statusline()
  if not M.last_status then
    return ""
  end
  local rate = acceptance(M.last_status)
  return rate and string.format("ngramd %d%%", math.floor(rate * 100 + 0.5)) or "ngramd"
end

--- Where a characterwise selection from mark `s` to mark `e` ('< '>) ends, as Vim's
--- operators take it: (0-based row, byte column). `last` is the text of its last line
--- (row e[1]), `count` the buffer's line count. With 'selection' exclusive '> is on the
--- first character after the selection (unless '< is there too: one character is
--- selected), else on the last selected character, which ends after it. A '> past the
--- line's last byte (`v$` with 'selection' inclusive, an empty line) stands on the line
--- break, which is then selected too: the end is the start of the next line (`0wv$d`
--- joins the lines), except on the buffer's last line, which has none, and with
--- 'selection' old, whose operators never take it.
local function selection_end(s, e, last, count)
  local row = e[1] - 1
  if vim.o.selection == "exclusive" and (s[1] ~= e[1] or s[2] ~= e[2]) then
    return row, math.min(#last, e[2])
  end
  if e[2] >= #last and vim.o.selection ~= "old" and e[1] < count then
    return row + 1, 0
  end
  local end_byte = math.min(#last, e[2] + 1)
  while end_byte < #last and bit.band(last:byte(end_byte + 1), 0xC0) == 0x80 do
    end_byte = end_byte + 1
  end
  return row, end_byte
end

--- The LSP range of a rewrite: with `visual` (the command came from the selection just
--- left), that characterwise selection's columns when it lies on lines line1..line2;
--- else whole lines. Lines past the buffer's end are clamped to it.
local function rewrite_range(bufnr, line1, line2, encoding, visual)
  local count = vim.api.nvim_buf_line_count(bufnr)
  line2 = math.max(1, math.min(line2, count))
  line1 = math.max(1, math.min(line1, line2))
  local s = vim.api.nvim_buf_get_mark(bufnr, "<")
  local e = vim.api.nvim_buf_get_mark(bufnr, ">")
  local vmode = vim.fn.visualmode()
  local last = vim.api.nvim_buf_get_lines(bufnr, line2 - 1, line2, false)[1] or ""
  if visual and vmode == "v" and s[1] == line1 and e[1] == line2 then
    local first = vim.api.nvim_buf_get_lines(bufnr, line1 - 1, line1, false)[1] or ""
    local end_row, end_byte = selection_end(s, e, last, count)
    return {
      start = { line = line1 - 1, character = text.lsp_col(first, s[2], encoding) },
      ["end"] = { line = end_row, character = end_row == line2 - 1 and text.lsp_col(last, end_byte, encoding) or 0 },
    }
  end
  return {
    start = { line = line1 - 1, character = 0 },
    ["end"] = { line = line2 - 1, character = text.lsp_col(last, #last, encoding) },
  }
end

--- Rewrites lines line1..line2 (or, with opts.visual, the visual selection on them) with
--- ngramd.rewriteSelection (uri, range, instruction, version: the buffer's LSP version
--- when the range was taken).
--- opts: line1, line2, visual (use the last selection's columns), range (an LSP range
--- instead), instruction (asked for when nil), callback(err, result).
function M.rewrite(opts)
  local bufnr = vim.api.nvim_get_current_buf()
  local client = client_mod.get(bufnr)
  if not client then
    if vim.api.nvim_buf_get_name(bufnr) == "" then
      notify("this buffer has no file name: write it to a file first", vim.log.levels.WARN)
    else
      notify("no ngramd client is attached to this buffer", vim.log.levels.WARN)
    end
    return
  end
  -- The range and the document version it belongs to, taken before the prompt: if the
  -- buffer changes meanwhile, the server refuses (ContentModified) instead of rewriting
  -- other text than the one selected.
  local encoding = client.offset_encoding or "utf-16"
  local range = opts.range or rewrite_range(bufnr, opts.line1, opts.line2, encoding, opts.visual)
  local version = client_mod.version(bufnr)
  local instruction = opts.instruction
  if instruction == nil then
    -- A head start: the daemon prefills the rewrite's prompt while the user types the
    -- instruction (ngramd/instruction.lua). Replies are ignored (a busy daemon drops a
    -- prepare; an older server lacks it, or its typed instruction).
    -- A prepared completion still waiting would only cost the daemon CPU meanwhile: stopped first.
    prepare.cancel(bufnr)
    instruction = instruction_mod.ask(function(typed)
      local arguments = { vim.uri_from_bufnr(bufnr), range, version }
      if typed ~= nil then -- no hole before it: a nil version is sent as null
        arguments = { arguments[1], range, version == nil and vim.NIL or version, typed }
      end
      client_mod.request(client, "workspace/executeCommand", {
        command = "ngramd.prepareRewrite",
        arguments = arguments,
      }, function() end, bufnr)
    end)
  end
  if instruction == nil then -- the prompt was cancelled (<C-c>): nothing to say
    return
  end
  if vim.trim(instruction) == "" then
    notify("no instruction given", vim.log.levels.WARN)
    return
  end
  local uri = vim.uri_from_bufnr(bufnr)
  local client_id = client.id
  local waiting = rewrites_waiting[client_id] or {}
  rewrites_waiting[client_id] = waiting
  local finished = false
  local function finish(err, result) -- the reply, or the client's exit: whichever comes first
    if finished then
      return
    end
    finished = true
    waiting[finish] = nil
    if next(waiting) == nil and rewrites_waiting[client_id] == waiting then
      rewrites_waiting[client_id] = nil
    end
    rewrites_in_flight = rewrites_in_flight - 1
    if err then
      notify("rewrite failed: " .. (err.message or vim.inspect(err)), vim.log.levels.ERROR)
    elseif type(result) == "table" and (result.changes or result.documentChanges) and not take_applied(result) then
      -- The server returned the edit without sending workspace/applyEdit (`ngramd lsp`
      -- does both: applying the returned one too would insert the text twice).
      vim.lsp.util.apply_workspace_edit(result, encoding)
    end
    if rewrites_in_flight == 0 then
      applied_edits = {} -- applyEdits no rewrite claimed (a failed one's) cannot match a later one
    end
    if opts.callback then
      opts.callback(err, result)
    end
  end
  rewrites_in_flight = rewrites_in_flight + 1
  waiting[finish] = true
  local ok = client_mod.request(client, "workspace/executeCommand", {
    command = "ngramd.rewriteSelection",
    arguments = { uri, range, instruction, version },
  }, finish, bufnr)
  if not ok then -- the client has stopped: no reply will come
    finish({ message = "the ngramd client has stopped" }, nil)
  end
end

--- How many rewrites wait for their reply (0 once each has answered, failed, or lost its client).
function M.rewrites_in_flight()
  return rewrites_in_flight
end

return M
