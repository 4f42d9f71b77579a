"""Tree to text: the canonical printer.

Every tree prints to exactly one text, and `parse(to_text(t)) == t`. The
layout is FORMAT.md's "Canonical text": the kernel line, a blank line, the
declarations, a blank line, the body; each `|` stands under the first
character of the size it continues.
"""

from __future__ import annotations

from .tree import Access, Binary, Buffer, Call, Expr, Name, Node, Num, Op, Program, Ref, Scope, Unary

PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}  # binary operators; unary minus binds tighter, atoms tightest
UNARY = 3
ATOM = 4


def precedence(expr: Expr) -> int:
    if isinstance(expr, Binary):
        return PRECEDENCE[expr.op]
    if isinstance(expr, Unary):
        return UNARY
    return ATOM


def expr_text(expr: Expr, compact: bool = False) -> str:
    """An expression with the fewest parentheses that keep its tree. Inside
    index brackets (`compact`) binary operators take no spaces."""
    if isinstance(expr, Num):
        return expr.text
    if isinstance(expr, Ref):
        return f"{{{expr.depth}}}"
    if isinstance(expr, Access):
        return access_text(expr)
    if isinstance(expr, Name):
        return expr.name
    if isinstance(expr, Call):
        sep = "," if compact else ", "
        return f"{expr.func}({sep.join(expr_text(a, compact) for a in expr.args)})"
    if isinstance(expr, Unary):
        return "-" + _operand(expr.operand, UNARY, compact)
    assert isinstance(expr, Binary)
    precedence = PRECEDENCE[expr.op]
    left = _operand(expr.left, precedence, compact)
    # Operators are left-associative: a right operand of equal precedence is
    # a different tree unless it keeps its parentheses.
    right = _operand(expr.right, precedence + 1, compact)
    return f"{left}{expr.op}{right}" if compact else f"{left} {expr.op} {right}"


def _operand(expr: Expr, needed: int, compact: bool) -> str:
    text = expr_text(expr, compact)
    return f"({text})" if precedence(expr) < needed else text


def access_text(access: Access) -> str:
    return f"{access.array}[{','.join(expr_text(i, compact=True) for i in access.index)}]"


def op_text(op: Op) -> str:
    return f"{access_text(op.target)} {op.assign} {expr_text(op.value)}"


def buffer_text(buffer: Buffer) -> str:
    dims = ", ".join(str(d) for d in buffer.dims)
    arrays = f" -> {', '.join(buffer.arrays)}" if buffer.arrays else ""
    return f"{buffer.name} {buffer.dtype} [{dims}] {buffer.location}{arrays}"


def kernel_text(program: Program) -> str:
    return f"kernel {program.name}({', '.join(program.inputs)}) -> {', '.join(program.outputs)}"


def _comments(comments: tuple[str, ...]) -> list[str]:
    return [f"#{c}" for c in comments]


def body_lines(body: tuple[Node, ...]) -> list[str]:
    """The body as lines. A scope's size stands on the line of its first
    operation; each later line of the scope has a `|` in the same column."""
    lines: list[str] = []
    # One entry per enclosing scope: [token, column, still to be opened].
    chain: list[list] = []

    def emit(nodes: tuple[Node, ...], column: int) -> None:
        for node in nodes:
            if isinstance(node, Scope):
                chain.append([node.token, column, True])
                emit(node.body, column + len(node.token) + 1)
                chain.pop()
                continue
            lines.extend(_comments(node.comments))
            text = ""
            for entry in chain:
                token, at, opening = entry
                text += " " * (at - len(text)) + (token if opening else "|")
                entry[2] = False
            lines.append(text + " " * (column - len(text)) + op_text(node))

    emit(body, 0)
    return lines


def to_text(program: Program) -> str:
    """The canonical text of a program, ending in a newline: the kernel line,
    the derivation (if any), the declarations and the body, each section
    after one blank line."""
    header = _comments(program.comments) + [kernel_text(program)]
    derivation = []
    if program.derivation is not None:
        d = program.derivation
        derivation = _comments(d.comments) + [f'spec "{d.spec}"'] + [f"move {m}" for m in d.moves]
    declarations = [line for b in program.buffers for line in _comments(b.comments) + [buffer_text(b)]]
    sections = [header, derivation, declarations, body_lines(program.body)]
    lines: list[str] = []
    for section in sections:
        if section:
            if lines:
                lines.append("")
            lines.extend(section)
    lines.extend(_comments(program.trailing))
    return "\n".join(lines) + "\n"
