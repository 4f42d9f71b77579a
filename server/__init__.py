"""The front doors: the `dojo` command line (and, later, the language server)."""
