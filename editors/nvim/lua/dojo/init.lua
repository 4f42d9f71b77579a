-- PerfDojo for Neovim: starts the `dojo-lsp` language server for `.dojo` files.
--
--   require("dojo").setup({
--     cmd = nil,        -- default: `dojo-lsp` on the PATH (lsp/dojo.lua)
--     workspace_venv = false, -- true: the workspace's .venv/bin/dojo-lsp first (see README)
--     settings = { dojo = { target = "native", repetitions = 10, measure = { automatic = true },
--                           agent = { checkpoint = "", rankQuickFixes = true } } },
--     keymaps = { ... } -- or false
--   })
--
-- On 0.11+ it is vim.lsp.config over the shipped lsp/dojo.lua, and
-- vim.lsp.enable; on 0.7-0.10, dojo.legacy does what those do.

local M = {}

local NAME = "dojo"
local uv = vim.loop or vim.uv
local legacy = vim.fn.has("nvim-0.11") == 0 and require("dojo.legacy") or nil

-- lsp/dojo.lua of this plugin: the command, filetypes and root markers, on every version.
local SHIPPED = dofile(vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h:h:h") .. "/lsp/dojo.lua")

local defaults = {
  -- A list (argv), or a function(root_dir, bufnr) returning one. nil: see default_cmd.
  cmd = nil,
  -- Start the workspace's own `.venv/bin/dojo-lsp` (found walking up from the
  -- file) rather than the one on the PATH. Off: opening a folder must not run
  -- its programs. Where Neovim has vim.secure (0.9+), the file must also be
  -- trusted (`:trust`), and Neovim asks the first time.
  workspace_venv = false,
  -- Environment of the server process (table), and its working directory (nil:
  -- the directory that holds the `.venv` the server was found in, else the root).
  cmd_env = nil,
  cmd_cwd = nil,
  -- The `dojo` settings section, answered to workspace/configuration and sent as
  -- initializationOptions. `{ dojo = {...} }` or the inner table itself.
  settings = {},
  -- Files whose presence marks the workspace root.
  root_markers = SHIPPED.root_markers,
  inlay_hints = true,
  -- Buffer-local mappings set when the server attaches; false disables them all,
  -- and a mapping set to false is left out.
  keymaps = {
    code_action = "<leader>da",
    benchmark = "<leader>db",
    generated_code = "<leader>dg",
    tune = "<leader>dt",
    agent_continue = "<leader>dc",
    format = "<leader>df",
    symbols = "<leader>ds",
    hover = "K",
  },
  on_attach = nil, -- function(client, bufnr), called after the plugin's own
  capabilities = nil, -- merged over the client's default capabilities
}

M.config = vim.deepcopy(defaults)

-- ---------------------------------------------------------------------------
-- helpers

local function notify(msg, level)
  vim.notify("dojo: " .. msg, level or vim.log.levels.INFO)
end

local function exists(path)
  return uv.fs_stat(path) ~= nil
end

local function dirname(path)
  return vim.fn.fnamemodify(path, ":h")
end

local function buf_dir(bufnr)
  local name = vim.api.nvim_buf_get_name(bufnr)
  if name == "" then
    return vim.fn.getcwd()
  end
  return dirname(vim.fn.fnamemodify(name, ":p"))
end

-- Yield `dir` and each of its ancestors up to /.
local function ancestors(dir)
  local current = dir
  return function()
    if current == nil then
      return nil
    end
    local result = current
    local parent = dirname(current)
    current = parent ~= current and parent or nil
    return result
  end
end

--- The nearest ancestor of the buffer's directory with one of the root markers,
--- else the buffer's directory.
function M.root_dir(bufnr)
  local start = buf_dir(bufnr or 0)
  for dir in ancestors(start) do
    for _, marker in ipairs(M.config.root_markers) do
      if exists(dir .. "/" .. marker) then
        return dir
      end
    end
  end
  return start
end

-- Whether the user trusts `exe` to run: vim.secure asks the first time, and
-- remembers (`:trust`); without vim.secure, opting in is the trust.
local function trusted(exe)
  if not (vim.secure and vim.secure.read) then
    return true
  end
  return vim.secure.read(exe) ~= nil
end

--- The command that starts the server for a buffer in `dir`, and its working
--- directory: with `workspace_venv`, the first `.venv/bin/dojo-lsp` found
--- walking up from `dir` (if trusted), else lsp/dojo.lua's `dojo-lsp` from the PATH.
function M.default_cmd(dir)
  if M.config.workspace_venv then
    for d in ancestors(dir) do
      local exe = d .. "/.venv/bin/dojo-lsp"
      if vim.fn.executable(exe) == 1 then
        if trusted(exe) then
          return { exe }, d
        end
        notify(exe .. " is not trusted (`:trust` it to use it); starting `dojo-lsp` from the PATH",
          vim.log.levels.WARN)
        break
      end
    end
  end
  return vim.deepcopy(SHIPPED.cmd), nil
end

-- argv and cwd for a buffer whose root is `root`.
local function resolve_cmd(root, bufnr)
  local cmd, cwd = M.config.cmd, nil
  if type(cmd) == "function" then
    cmd = cmd(root, bufnr)
  end
  if cmd == nil then
    cmd, cwd = M.default_cmd(bufnr and buf_dir(bufnr) or root)
  elseif type(cmd) == "string" then
    cmd = { cmd }
  end
  return cmd, M.config.cmd_cwd or cwd or root
end

local warned = {}
local function check_executable(cmd)
  if vim.fn.executable(cmd[1]) == 1 then
    return true
  end
  if not warned[cmd[1]] then
    warned[cmd[1]] = true
    notify(
      ("language server `%s` not found; install the project (`make install`) or pass `cmd` to require('dojo').setup()"):format(
        cmd[1]
      ),
      vim.log.levels.WARN
    )
  end
  return false
end

local function settings()
  return M.config.settings
end

local function capabilities()
  local caps = vim.lsp.protocol.make_client_capabilities()
  if M.config.capabilities then
    caps = vim.tbl_deep_extend("force", caps, M.config.capabilities)
  end
  return caps
end

-- client:request(...) and its kin, on every version.
local function client_call(client, method, ...)
  if legacy then
    return legacy.call(client, method, ...)
  end
  return client[method](client, ...)
end

local function get_clients(bufnr)
  if legacy then
    return legacy.clients(bufnr, NAME)
  end
  return vim.lsp.get_clients({ bufnr = bufnr, name = NAME })
end

--- The dojo client attached to `bufnr` (default: the current buffer), or nil.
function M.client(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  return get_clients(bufnr)[1]
end

local function need_client(bufnr)
  local client = M.client(bufnr)
  if not client then
    notify("no dojo language server is attached to this buffer", vim.log.levels.ERROR)
  end
  return client
end

local vocabularies = {} -- by client id

--- The names the server offers for the pickers (`dojo.vocabulary`):
--- { targets = {...}, tuneMethods = {...} }, or nil without a server.
function M.vocabulary(bufnr)
  local client = M.client(bufnr)
  if not client then
    return nil
  end
  if vocabularies[client.id] == nil then
    local params = { command = "dojo.vocabulary" }
    local response = client_call(client, "request_sync", "workspace/executeCommand", params, 5000, bufnr)
    if response and type(response.result) == "table" then
      vocabularies[client.id] = response.result
    end
  end
  return vocabularies[client.id]
end

-- A command's completion: the names of the vocabulary's `key` that start with what was typed.
local function complete_from(key)
  return function(typed)
    local names = {}
    for _, name in ipairs((M.vocabulary(0) or {})[key] or {}) do
      if name:sub(1, #typed) == typed then
        table.insert(names, name)
      end
    end
    return names
  end
end

-- ---------------------------------------------------------------------------
-- commands

local function execute(bufnr, command, arguments, on_result)
  local client = need_client(bufnr)
  if not client then
    return
  end
  local params = { command = command, arguments = arguments }
  client_call(client, "request", "workspace/executeCommand", params, function(err, result)
    if err then
      notify(command .. " failed: " .. (err.message or vim.inspect(err)), vim.log.levels.ERROR)
      return
    end
    on_result(result, client)
  end, bufnr)
end

local function format_seconds(s)
  if type(s) ~= "number" then
    return "?"
  elseif s >= 1 then
    return ("%.3f s"):format(s)
  elseif s >= 1e-3 then
    return ("%.3f ms"):format(s * 1e3)
  elseif s >= 1e-6 then
    return ("%.2f us"):format(s * 1e6)
  else
    return ("%.1f ns"):format(s * 1e9)
  end
end

--- Build, run and time the kernel of the buffer (workspace/executeCommand
--- `dojo.benchmark`); reports the median and whether the result verified.
function M.benchmark(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  local uri = vim.uri_from_bufnr(bufnr)
  notify("benchmarking " .. vim.fn.fnamemodify(vim.api.nvim_buf_get_name(bufnr), ":t") .. " ...")
  execute(bufnr, "dojo.benchmark", { uri }, function(result)
    if type(result) ~= "table" then
      notify("benchmark returned nothing", vim.log.levels.WARN)
    elseif result.error ~= nil and result.error ~= vim.NIL and result.error ~= "" then
      notify("benchmark failed: " .. tostring(result.error), vim.log.levels.ERROR)
    else
      local verified = result.verified
      local msg = "median " .. format_seconds(result.median_s)
      if type(result.summary) == "string" and result.summary ~= "" then
        msg = result.summary
      end
      if type(result.target) == "string" then
        msg = msg .. " on " .. result.target
      end
      if verified == true then
        msg = msg .. ", verified"
      elseif verified == false then
        msg = msg .. ", NOT verified"
      end
      notify(msg, verified == false and vim.log.levels.WARN or vim.log.levels.INFO)
    end
    M.last_benchmark = result
  end)
end

--- Search for a faster program (workspace/executeCommand `dojo.tune`); the
--- server applies the best one found as one edit and records its moves.
--- `method` (one of the server's `tuneMethods`) is picked with vim.ui.select
--- when nil; `budget` defaults to the `dojo.tune.budget` setting.
function M.tune(bufnr, method, budget)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  if method == nil or method == "" then
    local methods = (M.vocabulary(bufnr) or {}).tuneMethods
    if methods then
      vim.ui.select(methods, { prompt = "PerfDojo: tune with which method?" }, function(choice)
        if choice then
          M.tune(bufnr, choice, budget)
        end
      end)
      return
    end
  end
  local options = vim.empty_dict()
  if method ~= nil and method ~= "" then
    options.method = method
  end
  if budget ~= nil then
    options.budget = budget
  end
  notify("tuning " .. vim.fn.fnamemodify(vim.api.nvim_buf_get_name(bufnr), ":t") .. " ...")
  execute(bufnr, "dojo.tune", { vim.uri_from_bufnr(bufnr), options }, function(result)
    if type(result) ~= "table" then
      notify("tune returned nothing", vim.log.levels.WARN)
    elseif result.applied then
      notify(("tuned: %s -> %s (%.2fx, %d moves, %d evaluations)"):format(format_seconds(result.spec_s),
        format_seconds(result.time_s), result.speedup or 0, #result.moves, result.evaluations))
    else
      notify("tune: " .. tostring(result.reason), vim.log.levels.WARN)
    end
    M.last_tune = result
  end)
end

--- Let the learned agent play `steps` moves from the buffer's kernel
--- (workspace/executeCommand `dojo.agent.continue`); the server applies the best
--- program it met as one edit and records its moves. `steps` defaults to the
--- `dojo.agent.steps` setting; the agent is the `dojo.agent.checkpoint` one.
function M.agent_continue(bufnr, steps)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  local options = vim.empty_dict()
  if steps ~= nil then
    options.steps = steps
  end
  notify("the agent plays " .. vim.fn.fnamemodify(vim.api.nvim_buf_get_name(bufnr), ":t") .. " ...")
  execute(bufnr, "dojo.agent.continue", { vim.uri_from_bufnr(bufnr), options }, function(result)
    if type(result) ~= "table" then
      notify("the agent returned nothing", vim.log.levels.WARN)
    elseif result.applied then
      notify(("agent: %s -> %s (%.2fx, %d moves)"):format(format_seconds(result.start_s),
        format_seconds(result.time_s), result.speedup or 0, #result.moves))
    else
      notify("agent: " .. tostring(result.reason), vim.log.levels.WARN)
    end
    M.last_agent = result
  end)
end

local LANGUAGE_FILETYPES = { c = "c", cpp = "cpp", ["c++"] = "cpp", cuda = "cuda", hip = "cpp" }

-- Show the generated code ourselves: the file behind `uri` when it is one, else
-- a scratch buffer holding `text`.
local function open_generated(result)
  local uri, text = result.uri, result.text
  if type(uri) == "string" and uri:match("^file:") then
    local path = vim.uri_to_fname(uri)
    if exists(path) then
      vim.cmd("split " .. vim.fn.fnameescape(path))
      return vim.api.nvim_get_current_buf()
    end
  end
  if type(text) ~= "string" then
    notify("the server returned no generated code", vim.log.levels.WARN)
    return nil
  end
  vim.cmd("new")
  local buf = vim.api.nvim_get_current_buf()
  vim.bo[buf].buftype = "nofile"
  vim.bo[buf].bufhidden = "wipe"
  vim.bo[buf].swapfile = false
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, vim.split(text, "\n", { plain = true }))
  vim.bo[buf].modifiable = false
  local ft = LANGUAGE_FILETYPES[(result.language or ""):lower()]
  if ft then
    vim.bo[buf].filetype = ft
  end
  if type(uri) == "string" then
    pcall(vim.api.nvim_buf_set_name, buf, uri)
  end
  return buf
end

local function client_shows_documents()
  local caps = vim.lsp.protocol.make_client_capabilities()
  local sd = caps.window and caps.window.showDocument
  return sd ~= nil and sd.support == true and vim.lsp.handlers["window/showDocument"] ~= nil
end

--- The C, CUDA or HIP source of the buffer's kernel (`dojo.showGeneratedCode`)
--- for `target` (default: the `dojo.target` setting).
function M.generated_code(bufnr, target)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  local args = { vim.uri_from_bufnr(bufnr) }
  if target and target ~= "" then
    table.insert(args, target)
  end
  execute(bufnr, "dojo.showGeneratedCode", args, function(result)
    M.last_generated_code = result
    -- A client that supports window/showDocument has been sent one by the
    -- server; otherwise open it here.
    if type(result) == "table" and not client_shows_documents() then
      open_generated(result)
    end
  end)
end

--- Apply moves by name (`dojo.applyMoves`), e.g. "join_scopes(op=m#1, depth=0)".
--- The server answers with a workspace/applyEdit.
function M.apply_moves(bufnr, moves)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  local version = vim.lsp.util.buf_versions[bufnr] or 0
  execute(bufnr, "dojo.applyMoves", { vim.uri_from_bufnr(bufnr), version, moves }, function() end)
end

function M.format(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  if legacy then
    legacy.format(bufnr, NAME)
  else
    vim.lsp.buf.format({ bufnr = bufnr, name = NAME })
  end
end

local function code_action()
  vim.lsp.buf.code_action()
end

local ACTIONS = {
  code_action = { code_action, "PerfDojo: moves here (code actions)" },
  benchmark = { function() M.benchmark(0) end, "PerfDojo: benchmark" },
  generated_code = { function() M.generated_code(0) end, "PerfDojo: show generated code" },
  tune = { function() M.tune(0) end, "PerfDojo: tune (search for a faster program)" },
  agent_continue = { function() M.agent_continue(0) end, "PerfDojo: let the agent continue" },
  format = { function() M.format(0) end, "PerfDojo: format" },
  symbols = { function() vim.lsp.buf.document_symbol() end, "PerfDojo: document symbols" },
  hover = { function() vim.lsp.buf.hover() end, "PerfDojo: hover (generated code)" },
}

local function set_keymaps(bufnr)
  local keymaps = M.config.keymaps
  if not keymaps then
    return
  end
  for action, lhs in pairs(keymaps) do
    local spec = ACTIONS[action]
    if spec and lhs then
      vim.keymap.set("n", lhs, spec[1], { buffer = bufnr, silent = true, desc = spec[2] })
    elseif not spec then
      notify("unknown keymap action `" .. tostring(action) .. "`", vim.log.levels.WARN)
    end
  end
end

local function enable_inlay_hints(client, bufnr)
  if not M.config.inlay_hints then
    return
  end
  local ih = vim.lsp.inlay_hint
  -- 0.10+: vim.lsp.inlay_hint.enable(true, { bufnr = ... }); older versions have none.
  if type(ih) == "table" and type(ih.enable) == "function" and vim.fn.has("nvim-0.10") == 1 then
    local caps = client.server_capabilities or {}
    if caps.inlayHintProvider then
      pcall(ih.enable, true, { bufnr = bufnr })
    end
  end
end

local function on_attach(client, bufnr)
  set_keymaps(bufnr)
  enable_inlay_hints(client, bufnr)
  if M.config.on_attach then
    M.config.on_attach(client, bufnr)
  end
end

-- ---------------------------------------------------------------------------
-- starting the server

local function base_config()
  local s = settings()
  return {
    name = NAME,
    settings = s,
    init_options = s.dojo,
    capabilities = capabilities(),
    on_attach = on_attach,
  }
end

-- Neovim 0.7-0.10: the config of the client for `root`, or nil when its server is not there.
local function legacy_config(root, bufnr)
  local cmd, cwd = resolve_cmd(root, bufnr)
  if not check_executable(cmd) then
    return nil
  end
  local config = base_config()
  config.cmd = cmd
  config.cmd_cwd = cwd
  config.cmd_env = M.config.cmd_env
  config.root_dir = root
  config.workspace_folders = { { uri = vim.uri_from_fname(root), name = root } }
  return config
end

-- Neovim 0.11+: vim.lsp.config over lsp/dojo.lua, and vim.lsp.enable.
local last_root = {}

local function enable_modern()
  local config = base_config()
  config.filetypes = SHIPPED.filetypes
  config.root_dir = function(bufnr, on_dir)
    local root = M.root_dir(bufnr)
    local cmd = resolve_cmd(root, bufnr)
    if check_executable(cmd) then
      last_root = { root = root, bufnr = bufnr }
      on_dir(root)
    end
  end
  -- A function, so that the server found in the buffer's workspace is started
  -- there (a static `cmd` cannot depend on the buffer).
  config.cmd = function(dispatchers, resolved)
    local root = (resolved and type(resolved.root_dir) == "string" and resolved.root_dir) or last_root.root
    local bufnr = last_root.root == root and last_root.bufnr or nil
    local cmd, cwd = resolve_cmd(root or vim.fn.getcwd(), bufnr)
    if type(resolved) == "table" then
      -- what the client's config shows (client.config.cmd_cwd), as on 0.7
      resolved.cmd_cwd = cwd
    end
    return vim.lsp.rpc.start(cmd, dispatchers, { cwd = cwd, env = M.config.cmd_env })
  end
  vim.lsp.config(NAME, config)
  vim.lsp.enable(NAME)
end

local function define_commands()
  vim.api.nvim_create_user_command("DojoBenchmark", function()
    M.benchmark(0)
  end, { desc = "PerfDojo: build, run, time and verify this kernel" })
  vim.api.nvim_create_user_command("DojoGeneratedCode", function(args)
    M.generated_code(0, args.args)
  end, {
    nargs = "?",
    desc = "PerfDojo: show the code generated for this kernel [target]",
    complete = complete_from("targets"),
  })
  vim.api.nvim_create_user_command("DojoTune", function(args)
    M.tune(0, args.fargs[1], tonumber(args.fargs[2]))
  end, {
    nargs = "*",
    desc = "PerfDojo: search for a faster program [method] [budget]",
    complete = complete_from("tuneMethods"),
  })
  vim.api.nvim_create_user_command("DojoAgentContinue", function(args)
    M.agent_continue(0, tonumber(args.fargs[1]))
  end, { nargs = "?", desc = "PerfDojo: let the learned agent play [steps] moves" })
  vim.api.nvim_create_user_command("DojoApplyMove", function(args)
    M.apply_moves(0, { args.args })
  end, { nargs = 1, desc = "PerfDojo: apply a move, e.g. join_scopes(op=m#1, depth=0)" })
end

local function normalize_settings(s)
  s = s or {}
  if s.dojo == nil then
    -- the inner table was given
    s = { dojo = s }
  end
  return s
end

--- Configure and enable the plugin. Calling it again replaces the configuration
--- for clients started afterwards.
function M.setup(opts)
  opts = opts or {}
  local config = vim.tbl_deep_extend("force", vim.deepcopy(defaults), opts)
  -- Lists and `false` replace, not merge.
  if opts.keymaps == false then
    config.keymaps = false
  end
  if opts.cmd ~= nil then
    config.cmd = opts.cmd
  end
  if opts.root_markers ~= nil then
    config.root_markers = opts.root_markers
  end
  config.settings = normalize_settings(opts.settings)
  M.config = config

  if vim.filetype and vim.filetype.add and vim.fn.has("nvim-0.8") == 1 then
    vim.filetype.add({ extension = { dojo = "dojo" } })
  end
  define_commands()

  if legacy then
    legacy.enable(SHIPPED.filetypes[1], M.root_dir, legacy_config)
  else
    enable_modern()
  end
end

return M
