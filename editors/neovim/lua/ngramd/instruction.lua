-- The rewrite's instruction, asked on the command line (input()), prepared while it is typed.
--
-- A rewrite's prompt is the file around the selection, the selection, then the instruction
-- and a few tokens after it. As the prompt opens, the daemon prefills it up to the
-- instruction (ngramd.prepareRewrite); each time the typing pauses prepare.DELAY_MS, it
-- prefills it through the text typed so far (the command's 4th argument), so that the
-- rewrite, asked with that text, starts on a cached prompt, or prefills only the words typed
-- after the pause. A head start only: its replies are ignored.
local prepare = require("ngramd.prepare")

local M = {}

local uv = vim.uv or vim.loop

--- Asks for the instruction with input(); `send(typed)` sends a prepare: typed nil when the
--- prompt opens, then the text the typing paused on (never blank, never the same twice in a
--- row). Returns input()'s answer, or nil when the user interrupted it (<C-c>), as
--- vim.ui.input does; any other error raises.
function M.ask(send)
  send(nil)
  local timer = uv.new_timer()
  local open, sent = true, nil
  local group = vim.api.nvim_create_augroup("ngramd_instruction", { clear = true })
  vim.api.nvim_create_autocmd("CmdlineChanged", {
    group = group,
    pattern = "@", -- input()'s command line, not ":" or "/"
    callback = function()
      local typed = vim.fn.getcmdline()
      timer:stop()
      if vim.trim(typed) == "" or typed == sent then
        return
      end
      timer:start(prepare.DELAY_MS, 0, vim.schedule_wrap(function()
        if open then -- not once the prompt has closed: the rewrite itself is on its way
          sent = typed
          send(typed)
        end
      end))
    end,
  })
  local ok, answer = pcall(vim.fn.input, "Rewrite: ")
  open = false
  timer:stop()
  timer:close()
  vim.api.nvim_del_augroup_by_id(group)
  if not ok then
    if tostring(answer):find("Keyboard interrupt", 1, true) then
      return nil -- <C-c>: the user cancelled
    end
    error(answer, 0)
  end
  return answer
end

return M
