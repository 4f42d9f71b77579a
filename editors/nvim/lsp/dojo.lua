-- The PerfDojo language server for Neovim 0.11+ (`:help lsp-config`):
--
--   vim.lsp.enable("dojo")
--
-- is enough to start `dojo-lsp` from the PATH for `.dojo` files.
-- require("dojo").setup() layers the plugin's commands, mappings and settings
-- over this (and reads its defaults from here on older Neovims too).
return {
  cmd = { "dojo-lsp" },
  filetypes = { "dojo" },
  root_markers = { ".git", "pyproject.toml" },
}
