"""The front doors: the `dojo` command line (cli.py, one module per command group in commands/),
the language server `dojo-lsp` (lsp/) and the demo (demo.py). They parse options, call the layers
below and print; the logic they share lives in those layers."""
