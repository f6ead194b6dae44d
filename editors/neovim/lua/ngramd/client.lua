-- Starting and talking to `ngramd lsp`, across Neovim versions:
--   0.7:   vim.lsp.start_client + vim.lsp.buf_attach_client (one client per root here);
--   0.8+:  vim.lsp.start (reuses a client of the same name and root);
--   0.11+: client methods are called with ':' (client:request); '.' is deprecated.
local M = {}

M.NAME = "ngramd"

local function has(version)
  return vim.fn.has("nvim-" .. version) == 1
end
M.has = has

local method_calls = has("0.11")

--- client.request(method, params, handler, bufnr) -> ok, request_id
function M.request(client, method, params, handler, bufnr)
  if method_calls then
    return client:request(method, params, handler, bufnr)
  end
  return client.request(method, params, handler, bufnr)
end

function M.stop(client)
  if method_calls then
    return client:stop()
  end
  return client.stop()
end

function M.cancel(client, request_id)
  if method_calls then
    return client:cancel_request(request_id)
  end
  return client.cancel_request(request_id)
end

function M.notify(client, method, params)
  if method_calls then
    return client:notify(method, params)
  end
  return client.notify(method, params)
end

local function all_clients()
  if vim.lsp.get_clients then
    return vim.lsp.get_clients({ name = M.NAME })
  end
  local out = {}
  for _, c in pairs(vim.lsp.get_active_clients()) do
    if c.name == M.NAME then
      out[#out + 1] = c
    end
  end
  return out
end
M.all = all_clients

--- The ngramd client attached to `bufnr`, or nil.
function M.get(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  for _, c in ipairs(all_clients()) do
    if vim.lsp.buf_is_attached(bufnr, c.id) then
      return c
    end
  end
  return nil
end

--- Project root of a file: the nearest folder above it holding one of `markers`,
--- else the file's folder, else the working directory.
function M.root_dir(fname, markers)
  if fname == nil or fname == "" then
    return vim.fn.getcwd()
  end
  local dir = vim.fn.fnamemodify(fname, ":p:h")
  local cur = dir
  while true do
    for _, m in ipairs(markers) do
      local p = cur .. "/" .. m
      if vim.fn.isdirectory(p) == 1 or vim.fn.filereadable(p) == 1 then
        return cur
      end
    end
    local parent = vim.fn.fnamemodify(cur, ":h")
    if parent == cur then
      return dir
    end
    cur = parent
  end
end

-- 0.7 only: root -> client id, so that buffers of one project share a server.
local by_root = {}

--- Starts (or reuses) the client for `bufnr` and attaches it; returns the client id or
--- nil and an error message.
--- `lsp_config`: name, cmd, root_dir, init_options, capabilities, on_attach, handlers.
function M.start(bufnr, lsp_config)
  if vim.lsp.start then
    local id = vim.lsp.start(lsp_config, { bufnr = bufnr })
    if not id then
      return nil, "vim.lsp.start failed for " .. table.concat(lsp_config.cmd, " ")
    end
    return id
  end
  local id = by_root[lsp_config.root_dir]
  local existing = id and vim.lsp.get_client_by_id(id)
  if not existing or existing.is_stopped() then
    id = vim.lsp.start_client(lsp_config)
    if not id then
      return nil, "vim.lsp.start_client failed for " .. table.concat(lsp_config.cmd, " ")
    end
    by_root[lsp_config.root_dir] = id
  end
  if not vim.lsp.buf_attach_client(bufnr, id) then
    return nil, "could not attach the ngramd client to buffer " .. bufnr
  end
  return id
end

-- A renamed buffer (:file, :saveas) is another document (URI) to the server, which Neovim
-- tells at the next write at best (0.9+); requests under the new URI meanwhile find no
-- document. 0.10+: the client is detached before the rename (didClose of the old URI) and
-- the plugin attaches it again after (didOpen of the new). Before 0.10, attaching again
-- would send every change twice (a second nvim_buf_attach while the first lasts until the
-- next change): the client stays attached and after_rename sends the two itself.
local reattach = has("0.10")

--- Before `bufnr` is renamed: what after_rename needs, or nil where no initialized ngramd
--- client is attached (one still initializing opens the buffer under its new name).
function M.before_rename(bufnr)
  local client = M.get(bufnr)
  if not client or not client.initialized then
    return nil
  end
  if reattach then
    vim.lsp.buf_detach_client(bufnr, client.id)
  end
  return { client = client, uri = vim.uri_from_bufnr(bufnr), detached = reattach }
end

local line_endings = { unix = "\n", dos = "\r\n", mac = "\r" }

--- After the rename, before 0.10: didClose of the old URI, didOpen of the new (as Neovim
--- opens a document: its text, at the version its next change follows).
function M.after_rename(bufnr, before)
  local uri = vim.uri_from_bufnr(bufnr)
  if before.detached or uri == before.uri or not vim.lsp.buf_is_attached(bufnr, before.client.id) then
    return
  end
  local client, ft = before.client, vim.bo[bufnr].filetype
  local eol = line_endings[vim.bo[bufnr].fileformat] or "\n"
  local text = table.concat(vim.api.nvim_buf_get_lines(bufnr, 0, -1, true), eol) .. (vim.bo[bufnr].eol and eol or "")
  local version = vim.lsp.util.buf_versions[bufnr]
  M.notify(client, "textDocument/didClose", { textDocument = { uri = before.uri } })
  M.notify(client, "textDocument/didOpen", { textDocument = {
    uri = uri,
    languageId = client.config.get_language_id and client.config.get_language_id(bufnr, ft) or ft,
    version = type(version) == "number" and version or 0,
    text = text,
  } })
end

--- The LSP version of `bufnr`'s text as last synced to the server, or vim.NIL where it is
--- unknown (a command's version argument: the server then takes its current copy).
function M.version(bufnr)
  local version = vim.lsp.util.buf_versions[bufnr]
  return type(version) == "number" and version or vim.NIL
end

--- workspace/executeCommand; `callback(err, result)` runs on the main loop.
function M.execute(bufnr, command, arguments, callback)
  local client = M.get(bufnr)
  if not client then
    callback({ message = "no ngramd client is attached to this buffer" }, nil)
    return
  end
  M.request(client, "workspace/executeCommand", { command = command, arguments = arguments }, callback, bufnr)
end

return M
