"""Elementwise operators: one scalar expression per output element, operands broadcast as ONNX
defines (multidirectional, shapes aligned on the right).

    kernel = kernel_for(Node("act", "LeakyRelu", (x,), (y,), {"alpha": 0.1}))
    # 3 5 7 y[{0},{1},{2}] = max(x[{0},{1},{2}], 0) + 0.1 * min(x[{0},{1},{2}], 0)

FORMULAS is the table: each operator's scalar formula over its operands, written with the
format's functions only (exp log sqrt abs tanh erf max min) so that it is exact, not approximated.
Selections that ONNX writes with comparisons become max/min (LeakyRelu = max(x,0) + a*min(x,0));
an attribute value that would need a comparison or pow raises Unsupported. A constant scalar
operand (an initializer such as Div's sqrt(d)) becomes a literal, so that the kernel has one
input fewer and reads as the formula; any other operand is an input of the kernel.

Integer tensors take only the formulas marked exact for them: the format's `/` truncates toward
zero, as ONNX Runtime's integer Div does, and its conversion of a float to an integer truncates
(C's conversion), as ONNX Runtime's Cast does; values out of the integer's range are undefined in
both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..nodes import Kernel, Node, Unsupported, broadcast, loops, number
from ..registry import operator

INTEGERS = ("i32", "i64")
LONGEST_POWER = 16  # x*x*...*x: longer products are unreadable and drift from pow's rounding


class Terms:
    """What a formula is written from: the node's operands as accesses (or literals) at the
    output element `{0},{1},...`, and its attributes as literals of the output's dtype."""

    def __init__(self, node: Node, kernel: Kernel, names: tuple[str, ...]):
        self.node, self.kernel, self.names = node, kernel, names
        self.dtype = node.outputs[0].dtype
        self.index = loops(node.outputs[0].rank)

    def __getitem__(self, position: int) -> str:
        value = self.node.input(position)
        assert value is not None, (self.node.op, position)
        if value.constant is not None and value.constant.size == 1:
            return number(value.constant.item(), self.dtype)
        name = self.names[position] if position < len(self.names) else f"x{position}"
        return self.kernel.input(value, name).at(broadcast(value.shape, self.index))

    def all(self) -> list[str]:
        """Every operand of a variadic operator."""
        return [self[i] for i in range(len(self.node.inputs))]

    def attr(self, name: str, default: float) -> str:
        return self.literal(self.node.attr(name, default))

    def literal(self, value: float) -> str:
        return number(value, self.dtype)


@dataclass(frozen=True)
class Formula:
    """An operator's scalar formula; `integers` when it is exact on integer tensors too."""

    write: Callable[[Terms], str]
    integers: bool = False
    names: tuple[str, ...] = ("x",)


def softplus(x: str) -> str:
    # log(1 + exp(x)) overflows for large x; this form does not
    return f"max({x}, 0) + log(1 + exp(-abs({x})))"


def sigmoid(x: str) -> str:
    return f"1 / (1 + exp(-({x})))"


def negative_part(x: str, alpha: str) -> str:
    """alpha * (exp(x) - 1) below 0 and 0 above: exp(min(x, 0)) - 1 is exactly 0 for x >= 0."""
    return f"{alpha} * (exp(min({x}, 0)) - 1)"


def nested(function: str, operands: list[str]) -> str:
    """max(a, max(b, c)) for max of three."""
    return operands[0] if len(operands) == 1 else f"{function}({operands[0]}, {nested(function, operands[1:])})"


def gelu(t: Terms) -> str:
    """x Phi(x) with Phi the normal distribution: through erf, or its tanh approximation."""
    x, approximate = t[0], t.node.attr("approximate", "none")
    if approximate == "none":
        return f"0.5 * {x} * (1 + erf({x} * {t.literal(np.sqrt(0.5))}))"
    if approximate == "tanh":
        return f"0.5 * {x} * (1 + tanh({t.literal(np.sqrt(2 / np.pi))} * ({x} + 0.044715 * {x} * {x} * {x})))"
    raise Unsupported("invalid", f'Gelu with approximate="{approximate}": ONNX defines "none" and "tanh"')


def clip(t: Terms) -> str:
    """min(max(x, lo), hi); an absent bound leaves that side open. When lo > hi the result is hi,
    as ONNX defines."""
    x = t[0]
    if t.node.opset < 11:
        low, high = t.node.attr("min"), t.node.attr("max")
        low, high = (None if v is None else t.literal(v) for v in (low, high))
    else:
        low, high = (t[i] if t.node.input(i) is not None else None for i in (1, 2))
    if low is not None:
        x = f"max({x}, {low})"
    return x if high is None else f"min({x}, {high})"


def power(t: Terms) -> str:
    exponent = t.node.input(1)
    if exponent.constant is None:
        raise Unsupported("function", f"Pow with the computed exponent `{exponent.name}`: the format has no pow; "
                          "only a constant integer exponent (a product) or 0.5 (sqrt) is written")
    values = {float(v) for v in np.asarray(exponent.constant).reshape(-1)}
    if len(values) != 1:
        raise Unsupported("function", f"Pow with exponents {sorted(values)} differing by element: the format has "
                          "no pow")
    (e,) = values
    if e == 0.5:
        if t.dtype in INTEGERS:
            raise Unsupported("function", "Pow with exponent 0.5 on integers: sqrt is for floats")
        return f"sqrt({t[0]})"
    if e != int(e) or abs(e) > LONGEST_POWER:
        raise Unsupported("function", f"Pow with exponent {e:g}: the format has no pow; only integer exponents up "
                          f"to {LONGEST_POWER} in magnitude (a product) and 0.5 (sqrt) are written")
    if e < 0 and t.dtype in INTEGERS:
        raise Unsupported("function", f"Pow with exponent {e:g} on integers: ONNX Runtime converts pow's "
                          "fraction to an integer, which 1 / x^n does only for |x| > 1")
    product = " * ".join([t[0]] * abs(int(e))) or "1"
    return f"1 / ({product})" if e < 0 else product


def shrink(t: Terms) -> str:
    lambd, bias = float(t.node.attr("lambd", 0.5)), float(t.node.attr("bias", 0.0))
    if bias != lambd or lambd < 0:
        raise Unsupported("control flow", f"Shrink with bias {bias:g} and lambd {lambd:g}: only bias == lambd >= 0 "
                          "is max(x - lambd, 0) + min(x + lambd, 0); otherwise it selects by comparing x with lambd")
    x, lam = t[0], t.literal(lambd)
    return f"max({x} - {lam}, 0) + min({x} + {lam}, 0)"


def mean(t: Terms) -> str:
    operands = t.all()
    return f"({' + '.join(operands)}) / {len(operands)}" if len(operands) > 1 else operands[0]


def cast(t: Terms) -> str:
    # the format converts each operand to the dtype written, as C does: floats to integers truncate
    return t[0]


BINARY = ("a", "b")
VARIADIC = tuple("abcdefghijklmnop")

FORMULAS: dict[str, Formula] = {
    "Abs": Formula(lambda t: f"abs({t[0]})", integers=True),
    "Neg": Formula(lambda t: f"-{t[0]}", integers=True),
    "Exp": Formula(lambda t: f"exp({t[0]})"),
    "Log": Formula(lambda t: f"log({t[0]})"),
    "Sqrt": Formula(lambda t: f"sqrt({t[0]})"),
    "Tanh": Formula(lambda t: f"tanh({t[0]})"),
    "Erf": Formula(lambda t: f"erf({t[0]})"),
    "Reciprocal": Formula(lambda t: f"1 / {t[0]}"),
    "Relu": Formula(lambda t: f"max({t[0]}, 0)", integers=True),
    "Sigmoid": Formula(lambda t: sigmoid(t[0])),
    "Softplus": Formula(lambda t: softplus(t[0])),
    "Softsign": Formula(lambda t: f"{t[0]} / (1 + abs({t[0]}))"),
    "Mish": Formula(lambda t: f"{t[0]} * tanh({softplus(t[0])})"),
    "Swish": Formula(lambda t: f"{t[0]} * {sigmoid(t.attr('alpha', 1.0) + ' * ' + t[0])}"),
    "Elu": Formula(lambda t: f"max({t[0]}, 0) + {negative_part(t[0], t.attr('alpha', 1.0))}"),
    "Selu": Formula(lambda t: f"{t.attr('gamma', 1.0507009873554805)} * (max({t[0]}, 0) + "
                              f"{negative_part(t[0], t.attr('alpha', 1.6732632423543772))})"),
    "Celu": Formula(lambda t: f"max({t[0]}, 0) + min(0, {t.attr('alpha', 1.0)} * "
                              f"(exp({t[0]} / {t.attr('alpha', 1.0)}) - 1))"),
    "LeakyRelu": Formula(lambda t: f"max({t[0]}, 0) + {t.attr('alpha', 0.01)} * min({t[0]}, 0)"),
    "PRelu": Formula(lambda t: f"max({t[0]}, 0) + {t[1]} * min({t[0]}, 0)", names=("x", "slope")),
    "HardSigmoid": Formula(lambda t: f"max(min({t.attr('alpha', 0.2)} * {t[0]} + {t.attr('beta', 0.5)}, 1), 0)"),
    "HardSwish": Formula(lambda t: f"{t[0]} * max(min({t.literal(1 / 6)} * {t[0]} + 0.5, 1), 0)"),
    "Gelu": Formula(gelu),
    "Clip": Formula(clip, integers=True, names=("x", "low", "high")),
    "Shrink": Formula(shrink),
    "Add": Formula(lambda t: f"{t[0]} + {t[1]}", integers=True, names=BINARY),
    "Sub": Formula(lambda t: f"{t[0]} - {t[1]}", integers=True, names=BINARY),
    "Mul": Formula(lambda t: f"{t[0]} * {t[1]}", integers=True, names=BINARY),
    "Div": Formula(lambda t: f"{t[0]} / {t[1]}", integers=True, names=BINARY),
    "Pow": Formula(power, integers=True),
    "Max": Formula(lambda t: nested("max", t.all()), integers=True, names=VARIADIC),
    "Min": Formula(lambda t: nested("min", t.all()), integers=True, names=VARIADIC),
    "Sum": Formula(lambda t: " + ".join(t.all()), integers=True, names=VARIADIC),
    "Mean": Formula(mean, names=VARIADIC),
    "Cast": Formula(cast, integers=True),
    "CastLike": Formula(cast, integers=True),
}


@operator(*FORMULAS)
def elementwise(node: Node) -> Kernel:
    formula = FORMULAS[node.op]
    (y,) = node.outputs
    if y.dtype in INTEGERS and not formula.integers:
        raise Unsupported("dtype", f"{node.op} on {y.dtype}: its formula is exact for floats only")
    kernel = Kernel(node.op.lower())
    terms = Terms(node, kernel, formula.names)
    expression = formula.write(terms)
    ys = kernel.output(y)
    kernel.loop(y.shape, ys.at(terms.index), "=", expression)
    return kernel
