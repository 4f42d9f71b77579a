"""Mutated ONNX models fed to `dojo import`, with and without `--fuse`.

Each input is one of examples/onnx_models.py's models at its small size with one to three
mutations: bytes of the file flipped or the file cut short, or the model changed where onnx's
checker does not look: a dimension of a declared shape, an attribute's value, a node's operator
or input swapped, an initializer's shape. `dojo import` must write the import and exit 0, or exit 1
with `MODEL: error: ...`; a node it cannot write is listed with its reason; nothing may raise.

`python bench/fuzz_onnx.py [COUNT]` tries COUNT inputs (default 3000) and writes its section of
bench/results/fuzz.md; tests/onnx/test_hostile_models.py runs fewer in CI.
"""

from __future__ import annotations

import contextlib
import io
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

import onnx  # noqa: E402
import onnx_models  # noqa: E402

from bench.sections import machine, write_section  # noqa: E402
from server.cli import main as dojo  # noqa: E402

SEED = 18
OPERATORS = ("Relu", "Add", "MatMul", "Conv", "Softmax", "Transpose", "Reshape", "ReduceMean", "TopK", "Gemm",
             "LayerNormalization", "MaxPool", "Concat", "Slice", "Erf", "Where")
VALUES = (0, 1, -1, 2, 3, 7, -7, 1 << 31, -(1 << 40), 0.5, -0.0, float("inf"), float("nan"), 1e-30)


@dataclass(frozen=True)
class Mutant:
    model: str
    mutations: tuple[str, ...]
    data: bytes


def flip_bytes(rng: random.Random, data: bytes) -> bytes:
    mutable = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        mutable[rng.randrange(len(mutable))] = rng.randrange(256)
    return bytes(mutable)


def cut_short(rng: random.Random, data: bytes) -> bytes:
    return data[:rng.randrange(len(data))]


def _values(graph: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    return [*graph.input, *graph.value_info, *graph.output]


def change_dimension(rng: random.Random, model: onnx.ModelProto) -> None:
    dims = [d for v in _values(model.graph) for d in v.type.tensor_type.shape.dim]
    if dims:
        dim = rng.choice(dims)
        if rng.random() < 0.2:
            dim.dim_param = rng.choice(["batch", "n"])
        else:
            dim.dim_value = rng.choice([0, 1, 2, 3, 5, 1 << 20, 1 << 40])


def change_attribute(rng: random.Random, model: onnx.ModelProto) -> None:
    attributes = [a for n in model.graph.node for a in n.attribute]
    if not attributes:
        return
    attribute = rng.choice(attributes)
    if attribute.type == onnx.AttributeProto.INT:
        attribute.i = int(rng.choice([v for v in VALUES if isinstance(v, int)]))
    elif attribute.type == onnx.AttributeProto.FLOAT:
        attribute.f = float(rng.choice(VALUES))
    elif attribute.type == onnx.AttributeProto.INTS and attribute.ints:
        attribute.ints[rng.randrange(len(attribute.ints))] = int(rng.choice([v for v in VALUES if isinstance(v, int)]))
    elif attribute.type == onnx.AttributeProto.STRING:
        attribute.s = rng.choice([b"", b"NOTSET", b"SAME_UPPER", b"VALID", b"tanh", b"none", b"\xff"])


def change_operator(rng: random.Random, model: onnx.ModelProto) -> None:
    rng.choice(model.graph.node).op_type = rng.choice(OPERATORS)


def swap_input(rng: random.Random, model: onnx.ModelProto) -> None:
    node = rng.choice(model.graph.node)
    if node.input:
        names = [v.name for v in _values(model.graph)] + [t.name for t in model.graph.initializer] + ["", "nowhere"]
        node.input[rng.randrange(len(node.input))] = rng.choice(names)


def change_initializer(rng: random.Random, model: onnx.ModelProto) -> None:
    if model.graph.initializer:
        tensor = rng.choice(model.graph.initializer)
        if tensor.dims:
            tensor.dims[rng.randrange(len(tensor.dims))] = rng.choice([0, 1, 2, 7])


BYTES: dict[str, Callable[[random.Random, bytes], bytes]] = {"flip_bytes": flip_bytes, "cut_short": cut_short}
PROTO: dict[str, Callable[[random.Random, onnx.ModelProto], None]] = {
    "change_dimension": change_dimension, "change_attribute": change_attribute, "change_operator": change_operator,
    "swap_input": swap_input, "change_initializer": change_initializer}
MUTATIONS = (*BYTES, *PROTO)


def mutants(count: int, seed: int = SEED) -> Iterator[Mutant]:
    rng = random.Random(seed)
    models = {name: build(**onnx_models.SMALL[name]) for name, build in onnx_models.MODELS.items()}
    for _ in range(count):
        name = rng.choice(sorted(models))
        model = onnx.ModelProto()
        model.CopyFrom(models[name])
        applied = rng.sample(MUTATIONS, rng.randint(1, 3))
        for mutation in (m for m in applied if m in PROTO):
            PROTO[mutation](rng, model)
        data = model.SerializeToString()
        for mutation in (m for m in applied if m in BYTES):
            data = BYTES[mutation](rng, data)
        yield Mutant(name, tuple(applied), data)


@dataclass(frozen=True)
class Outcome:
    kind: str  # "imported", "rejected" or "failed"
    problem: str = ""


def try_import(mutant: Mutant, directory: Path, fuse: bool) -> Outcome:
    """`dojo import` of the mutant, in-process; a failure is an exception, or a rejection that
    does not name the file."""
    path = directory / f"{mutant.model}.onnx"
    path.write_bytes(mutant.data)
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = dojo(["import", str(path), "--out", str(directory / "out"), *(["--fuse"] if fuse else [])])
    except Exception as error:  # noqa: BLE001 - any exception is what this looks for
        return Outcome("failed", f"{type(error).__name__}: {error}")
    if code == 0:
        return Outcome("imported")
    first = err.getvalue().splitlines()[0] if err.getvalue() else ""
    if code == 1 and (first.startswith(f"{path}: error: ") or first.startswith(f"{path.name}: error: ")):
        return Outcome("rejected")
    return Outcome("failed", f"exit {code}: {first!r}")


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    outcomes: Counter[str] = Counter()
    failures = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as directory:
        for mutant in mutants(count):
            for fuse in (False, True):
                outcome = try_import(mutant, Path(directory), fuse)
                outcomes[outcome.kind] += 1
                if outcome.kind == "failed":
                    failures.append(f"{mutant.model} {mutant.mutations} fuse={fuse}: {outcome.problem}")
    elapsed = time.perf_counter() - started
    text = (f"# ONNX models: `dojo import` of mutated models\n\n`python bench/fuzz_onnx.py {count}` on {machine()}, "
            f"{elapsed:.0f} s: {count} mutants of examples/onnx_models.py's models ({', '.join(MUTATIONS)}; one to "
            f"three each), each imported with and without `--fuse`: {outcomes['imported']} imports, "
            f"{outcomes['rejected']} rejected as `MODEL: error: ...`, {outcomes['failed']} failures.\n")
    if failures:
        text += "\nThe first failures:\n\n" + "\n".join(f"- {f}" for f in failures[:10]) + "\n"
    write_section(ROOT / "bench" / "results" / "fuzz.md", text)
    print(text)


if __name__ == "__main__":
    main()
