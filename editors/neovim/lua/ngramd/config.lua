-- Options of require("ngramd").setup{...}: defaults, validation, and what is sent to the
-- server. Pure apart from vim.tbl_* helpers and executable look-up.
local M = {}

M.defaults = {
  -- Command that starts the server; nil: <root>/.venv/bin/ngramd, then `ngramd` on PATH,
  -- each run as `ngramd lsp [--model M] [--socket P]`.
  cmd = nil,
  filetypes = {
    "python", "lua", "javascript", "javascriptreact", "typescript", "typescriptreact",
    "go", "rust", "c", "cpp", "java", "sh", "ruby", "php", "zig", "haskell", "ocaml",
    "kotlin", "scala", "swift", "cs", "vim", "toml", "yaml", "json", "markdown",
  },
  root_markers = { ".git", "pyproject.toml", "package.json", "Cargo.toml", "go.mod", ".hg" },
  model = nil, -- passed as --model and in initializationOptions
  socket = nil, -- passed as --socket and in initializationOptions
  max_tokens = 64,
  multiline = true,
  temperature = 0,
  debounce_ms = 75,
  timeout_ms = nil, -- the server's timeoutMs (nil: its default, 8000)
  device = nil, -- "auto", "cpu" or "cuda": for the next daemon the server starts
  enabled = true,
  -- Where the cursor rests (300 ms), ask the server to prefill the completion prompt
  -- (ngramd.prepareCompletion), so that the first suggestion there comes sooner.
  prepare_completions = true,
  -- "auto": vim.lsp.inline_completion on Neovim >= 0.12, this plugin's ghost text before;
  -- false: always this plugin's ghost text; true: require the built-in one.
  native = "auto",
  -- Insert-mode keys; false disables one (or all, keymaps = false).
  keymaps = {
    accept = "<Tab>", -- falls back to a plain <Tab> when nothing is shown
    next = "<M-]>",
    prev = "<M-[>",
    dismiss = "<C-]>",
    trigger = "<M-\\>",
  },
  highlight = "NgramdGhost", -- linked to Comment unless defined
}

-- Every top-level option, those whose default is nil (absent from M.defaults) included.
M.names = { "cmd", "model", "socket", "timeout_ms", "device" }
for name in pairs(M.defaults) do
  M.names[#M.names + 1] = name
end
table.sort(M.names)
local known = {}
for _, name in ipairs(M.names) do
  known[name] = true
end

local function check(cond, msg)
  if not cond then
    error("ngramd.setup: " .. msg, 3)
  end
end

local function is_list_of_strings(t)
  if type(t) ~= "table" then
    return false
  end
  for _, v in ipairs(t) do
    if type(v) ~= "string" then
      return false
    end
  end
  return true
end

--- Defaults merged with `opts`; bad values raise a clear error naming the option.
function M.resolve(opts)
  opts = opts or {}
  check(type(opts) == "table", "options must be a table")
  for name in pairs(opts) do
    check(known[name], "unknown option " .. vim.inspect(name) .. " (options: " .. table.concat(M.names, ", ") .. ")")
  end
  local cfg = vim.tbl_deep_extend("force", vim.deepcopy(M.defaults), opts)
  if opts.keymaps == false then
    cfg.keymaps = false
  end
  if opts.filetypes then
    cfg.filetypes = opts.filetypes -- a list replaces, it does not merge by index
  end
  check(cfg.cmd == nil or is_list_of_strings(cfg.cmd) and #cfg.cmd > 0, "cmd must be a non-empty list of strings")
  check(is_list_of_strings(cfg.filetypes) or cfg.filetypes == "*", "filetypes must be a list of strings or '*'")
  check(type(cfg.max_tokens) == "number" and cfg.max_tokens >= 1 and cfg.max_tokens <= 1024,
    "max_tokens must be a number in 1..1024")
  check(type(cfg.debounce_ms) == "number" and cfg.debounce_ms >= 0 and cfg.debounce_ms <= 2000,
    "debounce_ms must be a number in 0..2000")
  -- The daemon's rule (daemon/protocol/requests.py check_temperature): a value it refuses would
  -- fail every completion, so it is refused here, at setup.
  check(type(cfg.temperature) == "number"
    and (cfg.temperature == 0 or cfg.temperature >= 1e-4 and cfg.temperature <= 100),
    "temperature must be 0 (greedy) or a number in 0.0001..100")
  check(cfg.timeout_ms == nil or type(cfg.timeout_ms) == "number" and cfg.timeout_ms >= 100
    and cfg.timeout_ms <= 600000, "timeout_ms must be a number in 100..600000")
  check(cfg.device == nil or cfg.device == "auto" or cfg.device == "cpu" or cfg.device == "cuda",
    "device must be 'auto', 'cpu' or 'cuda'")
  check(type(cfg.multiline) == "boolean", "multiline must be a boolean")
  check(type(cfg.enabled) == "boolean", "enabled must be a boolean")
  check(type(cfg.prepare_completions) == "boolean", "prepare_completions must be a boolean")
  check(cfg.model == nil or type(cfg.model) == "string", "model must be a string")
  check(cfg.socket == nil or type(cfg.socket) == "string", "socket must be a string")
  check(cfg.native == "auto" or type(cfg.native) == "boolean", "native must be 'auto', true or false")
  check(cfg.keymaps == false or type(cfg.keymaps) == "table", "keymaps must be a table or false")
  if cfg.keymaps then
    for name, lhs in pairs(cfg.keymaps) do
      check(M.defaults.keymaps[name] ~= nil, "keymaps." .. tostring(name) .. " is not a key of ngramd ("
        .. "accept, next, prev, dismiss, trigger)")
      check(lhs == false or type(lhs) == "string", "keymaps." .. name .. " must be a key (string) or false")
    end
  end
  check(type(cfg.highlight) == "string" and cfg.highlight ~= "", "highlight must be a highlight group name")
  check(is_list_of_strings(cfg.root_markers), "root_markers must be a list of strings")
  cfg.max_tokens = math.floor(cfg.max_tokens)
  cfg.debounce_ms = math.floor(cfg.debounce_ms)
  return cfg
end

--- The value of `flag` (`--model`, `--device`) in the server command `cfg.cmd` (after its
--- `lsp`), else `default`; nil where the command shows no `lsp` arguments (a wrapper script).
local function command_flag(cfg, flag, default)
  if not cfg.cmd then
    return default -- the plugin's own command passes --model only when set, never --device
  end
  local lsp_args = false
  for i, arg in ipairs(cfg.cmd) do
    if lsp_args and arg == flag then
      return cfg.cmd[i + 1]
    elseif lsp_args and arg:sub(1, #flag + 1) == flag .. "=" then
      return arg:sub(#flag + 2)
    end
    lsp_args = lsp_args or arg == "lsp"
  end
  return lsp_args and default or nil
end

--- initializationOptions / didChangeConfiguration settings: the server's keys.
--- `server_debounce_ms` overrides debounce_ms (the fallback path debounces in the client
--- and asks the server not to wait a second time).
--- The server keeps its value of a key it is not sent: an option left out is sent as the
--- value the server starts with (its default, the command's --model/--device, null: the
--- command's socket), so that setup() again without it takes back what an earlier one set.
function M.init_options(cfg, server_debounce_ms)
  return {
    maxTokens = cfg.max_tokens,
    multiline = cfg.multiline,
    temperature = cfg.temperature,
    debounceMs = server_debounce_ms or cfg.debounce_ms,
    enabled = cfg.enabled,
    prepareCompletions = cfg.prepare_completions,
    timeoutMs = math.floor(cfg.timeout_ms or 8000),
    socket = cfg.socket and cfg.socket ~= "" and cfg.socket or vim.NIL,
    model = cfg.model and cfg.model ~= "" and cfg.model or command_flag(cfg, "--model", vim.NIL),
    device = cfg.device or command_flag(cfg, "--device", "auto"),
  }
end

--- The server command for a buffer whose project root is `root` (may be nil).
--- `executable(path) -> bool` and `exepath(name) -> string` are injectable for tests.
function M.server_cmd(cfg, root, executable, exepath)
  if cfg.cmd then
    return vim.deepcopy(cfg.cmd)
  end
  executable = executable or function(p)
    return vim.fn.executable(p) == 1
  end
  exepath = exepath or vim.fn.exepath
  local exe
  if root then
    local venv = root .. "/.venv/bin/ngramd"
    if executable(venv) then
      exe = venv
    end
  end
  if not exe then
    local found = exepath("ngramd")
    if found == nil or found == "" then
      return nil, "ngramd was not found: pass cmd = {...} to setup, install it into the project's "
        .. ".venv, or put it on PATH"
    end
    exe = found
  end
  local cmd = { exe, "lsp" }
  if cfg.model and cfg.model ~= "" then
    cmd[#cmd + 1] = "--model"
    cmd[#cmd + 1] = cfg.model
  end
  if cfg.socket and cfg.socket ~= "" then
    cmd[#cmd + 1] = "--socket"
    cmd[#cmd + 1] = cfg.socket
  end
  return cmd
end

--- Whether the built-in vim.lsp.inline_completion is used.
function M.use_native(cfg)
  local available = vim.lsp.inline_completion ~= nil and vim.fn.has("nvim-0.12") == 1
  if cfg.native == "auto" then
    return available
  end
  if cfg.native == true and not available then
    error("ngramd.setup: native = true needs Neovim >= 0.12 (vim.lsp.inline_completion)", 2)
  end
  return cfg.native
end

return M
