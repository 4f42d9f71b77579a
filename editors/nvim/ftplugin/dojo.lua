-- Buffer settings for PerfDojo kernels (`.dojo` files).
if vim.b.did_ftplugin then
  return
end
vim.b.did_ftplugin = 1

vim.bo.commentstring = "# %s"
vim.bo.comments = ":#"
-- Scope tokens are aligned with spaces by the printer: never insert tabs.
vim.bo.expandtab = true
vim.bo.textwidth = 0

vim.b.undo_ftplugin = "setlocal commentstring< comments< expandtab< textwidth<"
