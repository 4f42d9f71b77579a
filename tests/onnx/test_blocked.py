"""Activations in blocks of channels across the graph (libgen/onnx/blocked.py): any kernel's lines
rewritten for blocked arrays compute what they did, the values chosen are those between
channels-as-lanes convolutions and the elementwise nodes around them, and a library missing a kernel
that shares a blocked value runs that part of the graph on ONNX Runtime in the graph's layout."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper, numpy_helper

from dojo_ir import interpret, load
from libgen.onnx.blocked import NotBlockable, blocked_shape, with_blocked
from libgen.onnx.catalogue import kernel_for
from libgen.onnx.importer import import_model
from libgen.onnx.nodes import Kernel, Value, loops
from libgen.onnx.plan import Info, Unit, concatenated_in_place, layout_consistent
from libgen.onnx.run import ModelRunner
from tests.onnx.single_node import node_of, normal, run_ort, single_node_model
from tests.onnx.test_importer import model, tensor
from tests.onnx.test_model_run import assert_runs_as_onnxruntime, library_of


def to_blocks(array: np.ndarray, block: int) -> np.ndarray:
    """An N C ... array in blocks of `block` channels: (N, C/block, ..., block)."""
    n, c, *rest = array.shape
    return np.ascontiguousarray(np.moveaxis(array.reshape(n, c // block, block, *rest), 2, -1))


def from_blocks(array: np.ndarray) -> np.ndarray:
    n, blocks, *rest, block = array.shape
    return np.moveaxis(array, -1, 2).reshape(n, blocks * block, *rest)


# -- the rewrite of a kernel's lines -----------------------------------------------------------------

def _relu(shape: tuple[int, ...]) -> Kernel:
    kernel = Kernel("relu")
    xs, ys = kernel.input(Value("a", "f32", shape)), kernel.output(Value("b", "f32", shape))
    kernel.loop(shape, ys.at(loops(len(shape))), "=", f"max({xs.at(loops(len(shape)))}, 0)")
    return kernel


def test_a_loop_over_all_channels_is_split_into_blocks_and_lanes_and_the_lanes_go_innermost() -> None:
    blocked = with_blocked(_relu((1, 64, 7, 7)), {"x": 32, "y": 32})
    assert [a.shape for a in blocked.arrays] == [(1, 2, 7, 7, 32), (1, 2, 7, 7, 32)]
    assert blocked.lines == ["1 2 7 7 32 y[{0},{1},{2},{3},{4}] = max(x[{0},{1},{2},{3},{4}], 0)"]


def test_a_channel_index_already_in_blocks_and_lanes_is_only_taken_apart() -> None:
    """A channels-as-lanes convolution's write-back: block {0}, lane {2}, which splits into two
    blocks of 16 for y, whose lanes then go innermost."""
    kernel = _relu((1, 64, 7, 7))
    kernel.lines = ["2 7 32 7 y[0,{0}*32+{2},{1},{3}] = max(x[0,({0}*32+{2}),{1},{3}], 0)"]
    assert with_blocked(kernel, {"x": 32, "y": 16}).lines == [
        "2 7 2 7 16 y[0,{0}*2+{2},{1},{3},{4}] = max(x[0,{0},{1},{3},{2}*16+{4}], 0)"]
    kernel.lines = ["2 7 32 7 y[0,{0}*32+{2},{1},{3}] += x[0,{0}*32+{2},{1},{3}]"]  # a reduction keeps its order
    assert with_blocked(kernel, {"x": 32, "y": 32}).lines == ["2 7 32 7 y[0,{0},{1},{3},{2}] += x[0,{0},{1},{3},{2}]"]


def test_a_channel_index_across_blocks_that_no_split_mends_is_refused() -> None:
    kernel = _relu((1, 64, 7, 7))
    kernel.lines = ["1 32 7 7 y[{0},{1}+8,{2},{3}] = x[{0},{1}+8,{2},{3}]"]  # channels 8..39: two blocks of 32
    with pytest.raises(NotBlockable, match="crosses blocks of 32"):
        with_blocked(kernel, {"y": 32})
    with pytest.raises(NotBlockable, match="in blocks of 48"):
        with_blocked(_relu((1, 64, 7, 7)), {"x": 48})


@dataclass(frozen=True)
class _Case:
    op: str
    inputs: dict
    attributes: dict
    constants: tuple[str, ...]


@st.composite
def node_cases(draw: st.DrawFn) -> tuple[_Case, int]:
    """A node of an NCHW image whose channels a block of 8, 16 or 32 divides, and that block."""
    block = draw(st.sampled_from([8, 16, 32]))
    channels = block * draw(st.integers(1, 3))
    image = (draw(st.integers(1, 2)), channels, draw(st.integers(1, 6)), draw(st.integers(1, 6)))
    x, seed = normal(*image), draw(st.integers(0, 99))
    op = draw(st.sampled_from(["Relu", "Add", "MaxPool", "AveragePool", "GlobalAveragePool", "Softmax", "LRN",
                               "Conv", "BatchNormalization"]))
    pool = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [draw(st.integers(1, 2))] * 2}
    cases = {
        "Relu": _Case("Relu", {"x": x}, {}, ()),
        "Add": _Case("Add", {"x": x, "b": normal(channels, 1, 1, seed=seed)}, {}, ()),
        "MaxPool": _Case("MaxPool", {"x": x}, pool, ()),
        "AveragePool": _Case("AveragePool", {"x": x}, {**pool, "count_include_pad": 0}, ()),
        "GlobalAveragePool": _Case("GlobalAveragePool", {"x": x}, {}, ()),
        "Softmax": _Case("Softmax", {"x": x}, {"axis": 1}, ()),  # a reduction across the blocks
        "LRN": _Case("LRN", {"x": x}, {"size": 3}, ()),  # a window across channels
        "Conv": _Case("Conv", {"x": x, "w": normal(channels, channels, 3, 3, seed=seed) / 10}, pool | {
            "kernel_shape": [3, 3]}, ("w",)),
        "BatchNormalization": _Case("BatchNormalization", {"x": x, **{n: normal(channels, seed=seed + i) ** 2 + 0.5
                                                                       for i, n in enumerate("sbmv")}}, {},
                                    ("s", "b", "m", "v")),
    }
    return cases[op], block


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(node_cases(), st.data())
def test_any_kernel_rewritten_for_blocked_arrays_computes_what_it_did(case_and_block, data) -> None:
    case, block = case_and_block
    model = single_node_model(case.op, case.inputs, case.attributes, case.constants, 1, 21)
    expected = run_ort(model, case.inputs, case.constants)
    kernel = kernel_for(node_of(case.op, case.inputs, case.attributes, case.constants, expected))
    values = {**case.inputs, **{n: d.value for n, d in kernel.derived.items()}, "y0": expected[0]}
    eligible = [a.name for a in kernel.inputs + kernel.outputs
                if len(a.shape) >= 3 and a.shape[1] % block == 0 and a.shape[1] == case.inputs["x"].shape[1]]
    chosen = data.draw(st.lists(st.sampled_from(eligible), unique=True, min_size=1) if eligible else st.just([]))
    blocks = dict.fromkeys(chosen, block)
    blocked = with_blocked(kernel, blocks)  # every one of these operators can be rewritten
    feed = {a.name: to_blocks(values[kernel.sources[a.name]], block) if a.name in blocks
            else values[kernel.sources[a.name]] for a in kernel.inputs}
    got = interpret(load(blocked.render()), feed)
    (output,) = kernel.outputs
    result = from_blocks(got[output.name]) if output.name in blocks else got[output.name]
    assert got[output.name].shape == (blocked_shape(output.shape, block) if output.name in blocks else output.shape)
    np.testing.assert_allclose(result, expected[0], rtol=1e-4, atol=1e-5, err_msg=blocked.render())


# -- which values, and the run ---------------------------------------------------------------------------

def residual_block(output_r1: bool = False):
    """x -> 3x3 Conv -> Relu (r1) -> 1x1 Conv -> + r1 -> Relu -> GlobalAveragePool: 32 channels at
    7x7, each Conv with its channels as lanes."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2"),
             helper.make_node("Add", ["c2", "r1"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["r2"], name="relu2"),
             helper.make_node("GlobalAveragePool", ["r2"], ["g"], name="pool")]
    weights = [numpy_helper.from_array(normal(32, 16, 3, 3, seed=1) / 12, "w1"),
               numpy_helper.from_array(normal(32, 32, 1, 1, seed=2) / 6, "w2")]
    outputs = [tensor("g", [1, 32, 1, 1])] + ([tensor("r1", [1, 32, 7, 7])] if output_r1 else [])
    return model(nodes, [tensor("x", [1, 16, 7, 7])], outputs, weights)


def test_the_values_between_lanes_convolutions_and_their_elementwise_nodes_are_blocked() -> None:
    assert import_model(residual_block()).blocked == dict.fromkeys(["c1", "r1", "c2", "s", "r2"], 32)
    assert import_model(residual_block(), fuse=True).blocked == {"r1": 32}


def test_a_window_along_the_channels_keeps_what_it_touches_in_the_graphs_layout() -> None:
    """An LRN after the first Relu: c1 and r1 stay NCHW, both with --fuse (the LRN in conv1's
    kernel) and without, and so does what the Add would mix with r1: nothing is blocked, where
    without the LRN five values are."""
    proto = residual_block()
    relu1 = next(node for node in proto.graph.node if node.name == "relu1")
    relu1.output[0] = "r0"
    proto.graph.node.insert(2, helper.make_node("LRN", ["r0"], ["r1"], name="lrn", size=3))
    assert import_model(proto).blocked == {} and import_model(proto, fuse=True).blocked == {}


def test_a_graph_output_stays_in_the_graphs_layout_and_so_does_what_would_convert_to_it() -> None:
    """r1 is an output: the Relu would convert c1 back element by element, and the Add would mix r1
    with c2, so nothing is blocked, where without that output five values are."""
    assert import_model(residual_block(output_r1=True)).blocked == {}


def test_a_blocked_model_runs_on_its_library_as_onnx_runtime_does(tmp_path: Path) -> None:
    for fuse in (False, True):
        path, library = library_of(residual_block(), tmp_path, f"blk{int(fuse)}", fuse=fuse)
        runner = ModelRunner(path, library, fuse=fuse)
        assert runner.imported.blocked and set(runner.placement.values()) == {"library"}
        assert_runs_as_onnxruntime(runner, path)


def test_a_library_that_lacks_a_kernel_sharing_a_blocked_value_runs_those_on_onnx_runtime(tmp_path: Path) -> None:
    path, library = library_of(residual_block(), tmp_path, "blk", fuse=False)
    imported = import_model(path)
    conv2 = next(c.kernel for c in imported.calls if c.nodes == ("conv2",))
    held = {c.kernel for c in imported.calls} - {conv2}
    # conv2 shares r1 and c2 with relu1 and the Add, they s and r2 with relu2 and the pool: none may run
    assert layout_consistent(held, imported.calls, imported.blocked) == set()
    assert layout_consistent(held, imported.calls, {}) == held
    manifest = json.loads((library / "manifest.json").read_text())
    for entry in manifest["kernels"]:  # as if built from another spec: the runner does not call it
        if entry["name"] == conv2:
            entry["spec_hash"] = "0" * len(entry["spec_hash"])
    (library / "manifest.json").write_text(json.dumps(manifest))
    runner = ModelRunner(path, library, fuse=False)
    assert set(runner.placement.values()) == {"onnxruntime"}
    assert_runs_as_onnxruntime(runner, path)


def fire_module(expand1: int = 32):
    """SqueezeNet's fire module at 7x7, then its MaxPool and the next squeeze: x -> 1x1 Conv -> Relu
    (s), expanded by a 1x1 Conv (`expand1` channels) and a 3x3 Conv (32), each with a Relu (e1, e3),
    concatenated along the channels (c), pooled 3x3 stride 2 (p), squeezed by a 1x1 Conv (q) and
    averaged (g). Every Conv has its channels as lanes."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="squeeze"),
             helper.make_node("Relu", ["c1"], ["s"], name="relu1"),
             helper.make_node("Conv", ["s", "w2"], ["c2"], name="expand1"),
             helper.make_node("Relu", ["c2"], ["e1"], name="relu2"),
             helper.make_node("Conv", ["s", "w3"], ["c3"], name="expand3", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c3"], ["e3"], name="relu3"),
             helper.make_node("Concat", ["e1", "e3"], ["c"], name="concat", axis=1),
             helper.make_node("MaxPool", ["c"], ["p"], name="pool", kernel_shape=[3, 3], strides=[2, 2]),
             helper.make_node("Conv", ["p", "w4"], ["q"], name="next"),
             helper.make_node("GlobalAveragePool", ["q"], ["g"], name="average")]
    weights = [numpy_helper.from_array(normal(16, 16, 1, 1, seed=1) / 4, "w1"),
               numpy_helper.from_array(normal(expand1, 16, 1, 1, seed=2) / 4, "w2"),
               numpy_helper.from_array(normal(32, 16, 3, 3, seed=3) / 12, "w3"),
               numpy_helper.from_array(normal(32, expand1 + 32, 1, 1, seed=4) / 8, "w4")]
    return model(nodes, [tensor("x", [1, 16, 7, 7])], [tensor("g", [1, 32, 1, 1])], weights)


def test_a_concat_along_the_channels_and_the_pool_after_it_pass_the_blocks_on(tmp_path: Path) -> None:
    """Its inputs and output in blocks of 32, the Concat's kernels write each input into its stretch
    of the output, as in NCHW: no conversion either side of it, and the pool reads whole vectors."""
    for fuse in (False, True):
        blocked = import_model(fire_module(), fuse=fuse).blocked
        assert {value: blocked.get(value) for value in ("e1", "e3", "c", "p")} == dict.fromkeys("e1 e3 c p".split(), 32)
        path, library = library_of(fire_module(), tmp_path, f"fire{int(fuse)}", fuse=fuse)
        runner = ModelRunner(path, library, fuse=fuse)
        assert runner.placement["concat"] == "view" and set(runner.placement.values()) == {"library", "view"}
        assert_runs_as_onnxruntime(runner, path)


def test_a_concat_of_inputs_in_blocks_of_different_widths_keeps_the_graphs_layout(tmp_path: Path) -> None:
    """48 channels from the 1x1 Conv make blocks of 16, 32 from the 3x3 blocks of 32: the Concat's
    inputs and output stay NCHW (their Convs write back rows), and it still writes them in place."""
    blocked = import_model(fire_module(expand1=48)).blocked
    assert not {"e1", "e3", "c", "p"} & blocked.keys()
    path, library = library_of(fire_module(expand1=48), tmp_path, "fire48", fuse=False)
    runner = ModelRunner(path, library, fuse=False)
    assert runner.placement["concat"] == "view"
    assert_runs_as_onnxruntime(runner, path)


def test_a_concat_is_written_in_place_only_when_its_inputs_and_output_share_a_layout() -> None:
    concat = helper.make_node("Concat", ["a", "b"], ["c"], name="concat", axis=1)
    f32 = np.dtype(np.float32)
    blocks = {"a": Info(f32, (1, 2, 4, 4, 32)), "b": Info(f32, (1, 2, 4, 4, 32))}

    def parts(output: tuple[int, ...]) -> dict[str, tuple[str, int]]:
        units = [Unit([0], ["x"], ["a"], "library"), Unit([0], ["x"], ["b"], "library"),
                 Unit([0], ["a", "b"], ["c"], "library")]
        return concatenated_in_place(units, [concat], {**blocks, "c": Info(f32, output)}, ["y"])

    assert parts((1, 4, 4, 4, 32)) == {"a": ("c", 0), "b": ("c", 4096)}
    assert parts((1, 128, 4, 4)) == {}  # its kernel converts the blocks to rows
