"""The server's features, one module each, each with `register(server)`."""

from . import (
    agent,
    code_actions,
    commands,
    configuration,
    diagnostics,
    formatting,
    hover,
    inlay_hints,
    symbols,
    tuning,
    vocabulary,
)

FEATURES = (configuration, diagnostics, code_actions, hover, inlay_hints, symbols, formatting, commands, tuning,
            agent, vocabulary)
