-- Neovim 0.7-0.10: what 0.11+ does with vim.lsp.config and vim.lsp.enable, and
-- the client API from before clients had methods. Required on those versions only.

local M = {}

--- `client.request(...)`: functions closed over the client, where 0.11 has client:request(...).
function M.call(client, method, ...)
  return client[method](...)
end

function M.clients(bufnr, name)
  if vim.lsp.get_clients then -- 0.10
    return vim.lsp.get_clients({ bufnr = bufnr, name = name })
  end
  local result = {}
  for _, client in pairs(vim.lsp.buf_get_clients(bufnr)) do
    if client.name == name then
      table.insert(result, client)
    end
  end
  return result
end

function M.format(bufnr, name)
  if vim.lsp.buf.format then -- 0.8
    vim.lsp.buf.format({ bufnr = bufnr, name = name })
  else
    vim.lsp.buf.formatting()
  end
end

-- One client per root, as vim.lsp.enable keeps them.
local clients_by_root = {}

--- Start (once per root) and attach a client to each buffer of `filetype`, now
--- and when one is opened. `root_of(bufnr)` is the buffer's root;
--- `config_for(root, bufnr)` the config of the client to start there, or nil
--- when it cannot be started.
function M.enable(filetype, root_of, config_for)
  local function attach(bufnr)
    if vim.bo[bufnr].buftype ~= "" or not vim.api.nvim_buf_is_loaded(bufnr) then
      return
    end
    local root = root_of(bufnr)
    local id = clients_by_root[root]
    local client = id and vim.lsp.get_client_by_id(id)
    if not client or client.is_stopped() then
      local config = config_for(root, bufnr)
      if not config then
        return
      end
      id = vim.lsp.start_client(config)
      if not id then
        vim.notify("dojo: could not start " .. table.concat(config.cmd, " "), vim.log.levels.ERROR)
        return
      end
      clients_by_root[root] = id
    end
    vim.lsp.buf_attach_client(bufnr, id)
  end

  local group = vim.api.nvim_create_augroup("dojo_lsp", { clear = true })
  vim.api.nvim_create_autocmd("FileType", {
    group = group,
    pattern = filetype,
    callback = function(args)
      attach(args.buf)
    end,
  })
  -- Buffers opened before (e.g. when the plugin is loaded lazily on ft).
  for _, bufnr in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(bufnr) and vim.bo[bufnr].filetype == filetype then
      attach(bufnr)
    end
  end
end

return M
