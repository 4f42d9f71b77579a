"""Random kernels of the ONNX catalogue (libgen/onnx/random_kernels.py): the cost model's extra
training data. They must be real kernels of the catalogue, computing what ONNX Runtime computes for
their node, at sizes across the memory hierarchy, and the same for the same seed everywhere."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import numpy_helper

from dojo_ir import interpret, load
from libgen.onnx.importer import import_model
from libgen.onnx.random_kernels import Draw, KiB, node_model, random_kernels
from libgen.onnx.registry import OPERATORS
from server.cli import main
from tests.onnx.single_node import run_ort

SMALL = {"smallest": 64, "largest": 16 * KiB, "max_flops": 4e5}  # sizes the interpreter runs in milliseconds


def test_the_same_seed_gives_the_same_kernels_and_another_seed_others() -> None:
    first = [(k.name, k.text) for k in random_kernels(6, seed=3, **SMALL)]
    assert first == [(k.name, k.text) for k in random_kernels(6, seed=3, **SMALL)]
    assert {text for _, text in first}.isdisjoint(k.text for k in random_kernels(6, seed=4, **SMALL))


def test_every_kernel_is_an_operator_of_the_catalogue_and_a_valid_spec() -> None:
    kernels = random_kernels(40, seed=0, **SMALL)
    assert len({k.name for k in kernels}) == 40
    for kernel in kernels:
        assert kernel.draw.op in OPERATORS
        # the cost model groups logs by the kernel's own name: a random matmul is not the library's
        assert load(kernel.text).name == kernel.name
    # forty draws meet most families, the products among them
    ops = {k.draw.op for k in kernels}
    assert {"Conv", "MatMul"} <= ops and len(ops) >= 12, ops


@pytest.mark.parametrize("seed", range(4))
def test_each_kernel_computes_what_onnx_runtime_computes_for_its_node(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for kernel in random_kernels(10, seed=seed, **SMALL):
        model = node_model(kernel.draw, seed)
        imported = import_model(model)
        (call,) = imported.calls
        values = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in kernel.draw.inputs
                  if not t.constant}
        (expected,) = run_ort(model, values, constants=())
        values |= {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
        values |= {name: derived.value for name, derived in imported.constants.items()}
        program = load(imported.kernels[call.kernel])
        got = interpret(program, {array: values[value] for array, value in zip(program.inputs, call.inputs,
                                                                              strict=True)})
        scale = max(1.0, float(np.abs(expected).max()))
        np.testing.assert_allclose(got[program.outputs[0]], expected, rtol=1e-4, atol=1e-4 * scale,
                                   err_msg=kernel.draw.describe())


def product_flops(draw: Draw) -> int:
    """Twice the multiply-adds of a Conv, MatMul or Gemm draw; 0 for the rest."""
    shapes = {t.name: t.shape for t in draw.inputs}
    if draw.op == "Conv":
        (n, _, h, w), (co, per_group, kh, kw) = shapes["x"], shapes["w"]
        stride, pad = draw.attributes["strides"][0], draw.attributes["pads"][0]
        out = ((h + 2 * pad - kh) // stride + 1) * ((w + 2 * pad - kw) // stride + 1)
        return 2 * n * co * per_group * kh * kw * out
    if draw.op in ("MatMul", "Gemm"):
        *batch, m, k = shapes["a"]
        n = shapes["b"][1] if draw.op == "MatMul" else shapes["b"][0]  # Gemm's b is transposed
        return 2 * int(np.prod(batch)) * m * k * n
    return 0


def test_the_default_sizes_run_from_l1_to_dram_and_products_stay_under_their_flops() -> None:
    draws = [k.draw for k in random_kernels(48, seed=0)]
    sizes = [4 * sum(int(np.prod(t.shape)) for t in draw.inputs) for draw in draws]
    assert min(sizes) < 128 * KiB and max(sizes) > 8 * KiB * KiB, sizes
    flops = [product_flops(d) for d in draws]
    assert sum(f > 0 for f in flops) >= 10 and max(flops) <= 64e6, flops


def test_the_command_writes_one_file_a_kernel(tmp_path, capsys) -> None:
    assert main(["costmodel", "kernels", "--count", "3", "--seed", "1", "--out", str(tmp_path)]) == 0
    files = sorted(tmp_path.glob("*.dojo"))
    assert [f.stem for f in files] == sorted(k.name for k in random_kernels(3, seed=1))
    assert all(load(f.read_text()).outputs for f in files)
    assert main(["costmodel", "kernels", "--count", "0", "--out", str(tmp_path)]) != 0
    assert "--count must be at least 1" in capsys.readouterr().err
