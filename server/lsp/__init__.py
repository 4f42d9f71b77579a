"""`dojo-lsp`, the PerfDojo language server (pygls).

    main.py          the command: stdio, TCP, or `--check` for CI (check.py)
    server.py        DojoServer: settings, document snapshots, measurements, tasks
    documents.py     Snapshot: one version of one document and all it implies
    features/        one module per LSP feature, each with `register(server)`
    requests.py      what the features share: the document a request names, arguments, edits
    protocol.py      pygls's JSON-RPC, with every request answered (malformed ones with InvalidParams)
    edits.py         minimal, line-based text edits
    progress.py      cancellable work-done progress
    measurements.py  asynchronous, cached timing through a runner
    settings.py      the `dojo` configuration section
"""
