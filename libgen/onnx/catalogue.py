"""The operator catalogue: which ONNX operators become kernels, and why the others do not.

    kernel = kernel_for(node)          # or Unsupported(feature, why)
    print(coverage().percent)          # the share of expressible operators that are covered

`kernel_for(node)` is the kernel of one node. Every operator of the default ONNX domain is in one
of three sets: covered (registered by a module of `ops`, or in FOLDED: evaluated when the model is
imported, since its result is a constant at static shapes), not expressible (NOT_EXPRESSIBLE, with
the feature of FEATURES that it needs and why), or expressible but not written yet. An operator
counts as expressible when the format can write it exactly for float tensors, for the attribute
values models use; a covered operator may still refuse some attribute values (Pow with exponent
1.3, Shrink with bias unlike lambd), and says why. `coverage()` counts the three sets
against onnx's own list. Deprecated operators (onnx marks their latest schema deprecated: Scatter,
Upsample) are not counted: current opsets do not have them, and their successors are.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx.defs

from . import ops  # noqa: F401  (registers the operators)
from .nodes import FEATURES, Kernel, Node, Unsupported
from .registry import OPERATORS

# operators whose outputs are constants once shapes are static; the importer computes them
FOLDED = {
    "Constant": "its value is in the model",
    "Shape": "the shapes are static",
    "Size": "the shapes are static",
}


def _each(feature: str, why: str, *operators: str) -> dict[str, tuple[str, str]]:
    return {op: (feature, why) for op in operators}


# operator -> (feature, why): what each operator the format cannot write needs
NOT_EXPRESSIBLE: dict[str, tuple[str, str]] = {
    **_each("function", "needs a function the format lacks (trigonometric, inverse hyperbolic)",
            "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Asinh", "Acosh", "Atanh"),
    "Sinh": ("function", "(exp(x) - exp(-x)) / 2 cancels to 0 for small x: it needs expm1"),
    "Cosh": ("function", "(exp(x) + exp(-x)) / 2 overflows for 88.7 < abs(x) < 89.4, where cosh is finite"),
    **_each("function", "rounds to an integer: needs floor/ceil/rint", "Floor", "Ceil", "Round"),
    "Mod": ("function", "a remainder needs fmod or floor division"),
    **_each("function", "works on bits, which the format has no operations for",
            "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", "BitCast"),
    **_each("function", "its coefficients are cosines of the index", "DFT", "STFT", "BlackmanWindow",
            "HammingWindow", "HannWindow"),
    "MelWeightMatrix": ("function", "the mel scale needs log10 and floor"),
    **_each("indirection", "indexes one tensor by the values of another", "Gather", "GatherElements", "GatherND",
            "ScatterElements", "ScatterND", "TensorScatter", "OneHot", "MaxUnpool"),
    **_each("indirection", "samples at positions computed from the data", "GridSample", "DeformConv", "RoiAlign",
            "MaxRoiPool"),
    **_each("indirection", "reads the probability of each label by the label's value", "NegativeLogLikelihoodLoss",
            "SoftmaxCrossEntropyLoss"),
    **_each("data-dependent range", "how many elements it outputs depends on the data", "NonZero", "Unique",
            "Compress", "NonMaxSuppression"),
    "TopK": ("data-dependent range", "which elements it outputs depends on the data (a sort)"),
    "ReverseSequence": ("data-dependent range", "each sequence's reversed range is an input"),
    **_each("dependent iteration", "each step depends on the previous one's result", "CumSum", "CumProd", "RNN",
            "LSTM", "GRU", "LinearAttention"),
    **_each("control flow", "runs a subgraph chosen or repeated by the data", "If", "Loop", "Scan"),
    **_each("control flow", "compares values", "Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual"),
    "Where": ("control flow", "selects by a condition"),
    "Sign": ("control flow", "compares with 0"),
    "ThresholdedRelu": ("control flow", "compares x with alpha"),
    **_each("control flow", "finds the position of the largest or smallest value", "ArgMax", "ArgMin", "Hardmax"),
    "Det": ("control flow", "an LU decomposition chooses its pivots by comparing values"),
    "TfIdfVectorizer": ("control flow", "counts n-grams by comparing values"),
    **_each("dtype", "works on booleans", "And", "Or", "Xor", "Not"),
    **_each("dtype", "outputs booleans", "IsInf", "IsNaN"),
    "BitShift": ("dtype", "works on unsigned integers"),
    **_each("dtype", "works on 8-bit quantized integers", "QuantizeLinear", "DequantizeLinear",
            "DynamicQuantizeLinear", "QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger"),
    "ImageDecoder": ("dtype", "decodes compressed image bytes (uint8)"),
    **_each("random", "draws random numbers", "RandomNormal", "RandomNormalLike", "RandomUniform",
            "RandomUniformLike", "Bernoulli", "Multinomial"),
    **_each("not a tensor", "works on sequences of tensors", "SequenceAt", "SequenceConstruct", "SequenceEmpty",
            "SequenceErase", "SequenceInsert", "SequenceLength", "SequenceMap", "SplitToSequence",
            "ConcatFromSequence"),
    **_each("not a tensor", "works on optional values", "Optional", "OptionalGetElement", "OptionalHasElement"),
    **_each("not a tensor", "works on strings", "StringConcat", "StringNormalizer", "StringSplit", "RegexFullMatch"),
}


def kernel_for(node: Node) -> Kernel:
    """The kernel of `node`, or Unsupported naming what it needs."""
    if node.op in NOT_EXPRESSIBLE:
        feature, why = NOT_EXPRESSIBLE[node.op]
        raise Unsupported(feature, why)
    builder = OPERATORS.get(node.op)
    if builder is None:
        raise Unsupported("not written", f"the catalogue has no {node.op} yet")
    return builder(node)


@dataclass(frozen=True)
class Coverage:
    """The default domain's operators in the three sets, each sorted; `folded` is the part of
    `covered` that the importer evaluates instead of writing a kernel."""

    covered: tuple[str, ...]
    folded: tuple[str, ...]
    not_written: tuple[str, ...]
    not_expressible: tuple[tuple[str, str, str], ...]  # (operator, feature, why)
    deprecated: tuple[str, ...]

    @property
    def total(self) -> int:
        return len(self.covered) + len(self.not_written) + len(self.not_expressible)

    @property
    def expressible(self) -> int:
        return len(self.covered) + len(self.not_written)

    @property
    def percent(self) -> float:
        """The share of the expressible operators that are covered, in percent."""
        return 100 * len(self.covered) / self.expressible if self.expressible else 100.0

    def summary(self) -> str:
        """The totals in one line, as `dojo import --coverage` ends and docs/onnx.md states them."""
        return (f"{len(self.covered)} of {self.expressible} expressible operators covered ({self.percent:.1f}%), "
                f"{len(self.not_written)} not written; {len(self.not_expressible)} of {self.total} operators of the "
                f"default domain not expressible; not counted (deprecated): {', '.join(self.deprecated) or 'none'}")


def default_domain() -> tuple[list[str], list[str]]:
    """The operators of the default domain at onnx's latest opset, and the deprecated ones."""
    schemas = [s for s in onnx.defs.get_all_schemas() if s.domain == ""]
    return sorted(s.name for s in schemas if not s.deprecated), sorted(s.name for s in schemas if s.deprecated)


def coverage() -> Coverage:
    operators, deprecated = default_domain()
    assert all(feature in FEATURES for feature, _ in NOT_EXPRESSIBLE.values())
    covered = [op for op in operators if op not in NOT_EXPRESSIBLE and (op in OPERATORS or op in FOLDED)]
    return Coverage(
        covered=tuple(covered),
        folded=tuple(op for op in covered if op in FOLDED and op not in OPERATORS),
        not_written=tuple(op for op in operators if op not in NOT_EXPRESSIBLE and op not in covered),
        not_expressible=tuple((op, *NOT_EXPRESSIBLE[op]) for op in operators if op in NOT_EXPRESSIBLE),
        deprecated=tuple(deprecated),
    )
