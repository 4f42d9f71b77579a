"""`python -m dojo_ir.moves`: the catalogue of moves (docs/moves.md), written
from each move module's own docstring, declared arguments and targets, and first example."""

from __future__ import annotations

import inspect

from . import KINDS


def catalogue() -> str:
    lines = [
        "# The moves",
        "",
        "Every move is one module in `dojo_ir/moves/`; this page is generated from their docstrings",
        "(`python -m dojo_ir.moves > docs/moves.md`). `dojo moves FILE` lists the legal ones in a file,",
        "`dojo apply FILE MOVE...` applies them.",
        "",
        "A move names its location by tree, not by text: `op=e` is the operation writing `e` (`op=e#2` the",
        "second one, in execution order, when several do), `depth=d` the scope at depth d around it,",
        "`buffer=t` a buffer. Updates of one reduction operator may be reordered by a move (that",
        "reassociates floating-point sums); every other dependence is kept exactly.",
        "",
        "Each move declares its arguments, listed below in their canonical order: a move may be written",
        "with them in any order, and is read (and listed) in this one. An unknown, repeated, missing or",
        "empty argument, or a value of the wrong kind or out of range, is an error at its column.",
        "",
        "Each move also declares the targets it serves; a search for a target (`dojo tune`, the agent)",
        "considers only the moves that serve it.",
        "",
    ]
    for name, kind in KINDS.items():
        doc = inspect.cleandoc(kind.__doc__ or "")
        summary, _, rest = doc.partition("\n")
        before, move, after = kind.EXAMPLES[0]
        arguments = [f"- `{p.key}`{' (optional)' * p.optional}: {p.describe()}" for p in kind.ARGS]
        lines += [f"## `{name}` — {kind.TITLE}", "", summary.split(": ", 1)[-1], "", rest.strip("\n"), "",
                  "Arguments:", "", *arguments, "", f"Targets: {kind.TARGETS.describe()}.", "",
                  f"Example: `{move}`", "",
                  "```", before.split("\n\n")[-1].rstrip(), "```", "", "becomes", "",
                  "```", after.split("\n\n")[-1].rstrip(), "```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    print(catalogue(), end="")
