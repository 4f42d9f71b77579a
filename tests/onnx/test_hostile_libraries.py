"""A library folder is code: `dojo model run` loads from it only a shared library of the folder itself,
calls only the functions that library defines for its kernels, and loads nothing before the specs'
hashes are checked; a manifest cannot change a kernel's arrays, and a malformed one is an error."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from bench.fuzz_library import fuzz
from examples.onnx_models import with_topk
from libgen.onnx.run import ModelRunner, RunError
from libgen.runtime import defined_functions
from tests.onnx.test_model_run import assert_runs_as_onnxruntime, dojo, inputs_of, library_of


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return library_of(with_topk(rows=3, width=7), tmp_path_factory.mktemp("hostile_lib"), "hl_topk")


@pytest.fixture
def tampered(built: tuple[Path, Path], tmp_path: Path) -> Callable[[Callable[[dict[str, Any]], None]], Path]:
    """A copy of the library whose manifest `change` edits in place."""
    def make(change: Callable[[dict[str, Any]], None]) -> Path:
        library = tmp_path / "library"
        shutil.copytree(built[1], library)
        manifest = json.loads((library / "manifest.json").read_text())
        change(manifest)
        (library / "manifest.json").write_text(json.dumps(manifest))
        return library
    return make


def _marking_library(path: Path, marker: Path, symbols: tuple[str, ...] = ()) -> None:
    """A shared library whose constructor creates `marker` when it is loaded."""
    source = path.with_suffix(".c")
    functions = "".join(f"int {name}(void) {{ return 0; }}\n" for name in symbols)
    source.write_text(f'#include <stdio.h>\n__attribute__((constructor)) static void loaded(void) '
                      f'{{ fclose(fopen("{marker}", "w")); }}\n{functions}')
    subprocess.run(["gcc", "-shared", "-fPIC", str(source), "-o", str(path)], check=True)


def test_the_library_defines_its_kernels_functions_itself(built: tuple[Path, Path]) -> None:
    functions = defined_functions(built[1] / "libhl_topk.so")
    assert {"hl_topk_matmul", "hl_topk_mul", "hl_topk_softmax"} <= functions
    assert "system" not in functions and "malloc" not in functions  # its dependencies' are not its own


@pytest.mark.parametrize("elsewhere", ["../libelsewhere.so", "ABSOLUTE", "link.so", ".", ""])
def test_a_shared_library_outside_the_folder_is_never_loaded(elsewhere: str, built: tuple[Path, Path],
                                                             tampered: Callable, tmp_path: Path) -> None:
    marker = tmp_path / "loaded"
    _marking_library(tmp_path / "libelsewhere.so", marker, ("hl_topk_matmul", "hl_topk_mul", "hl_topk_softmax"))
    name = str(tmp_path / "libelsewhere.so") if elsewhere == "ABSOLUTE" else elsewhere
    library = tampered(lambda m: m.update(shared_library=name))
    (library / "link.so").symlink_to(tmp_path / "libelsewhere.so")
    with pytest.raises(RunError, match="must be a file of the library's own directory"):
        ModelRunner(built[0], library)
    assert not marker.exists()


@pytest.mark.parametrize("symbol", ["system", "abort", "hl_topk_softmax"])
def test_a_kernel_calls_only_the_function_its_library_defines_for_it(symbol: str, built: tuple[Path, Path],
                                                                     tampered: Callable) -> None:
    def point_matmul_at(manifest: dict[str, Any]) -> None:
        next(k for k in manifest["kernels"] if k["name"] == "matmul")["symbol"] = symbol

    with pytest.raises(RunError, match=f"its function `{symbol}` is not `hl_topk_matmul`"):
        ModelRunner(built[0], tampered(point_matmul_at))


def test_a_library_of_another_model_is_not_loaded(built: tuple[Path, Path], tmp_path: Path) -> None:
    library, marker = tmp_path / "library", tmp_path / "loaded"
    shutil.copytree(built[1], library)
    _marking_library(library / "libhl_topk.so", marker, ("hl_topk_matmul", "hl_topk_mul", "hl_topk_softmax"))
    other = tmp_path / "taller.onnx"  # the same kernel names, other specs
    onnx.save(with_topk(rows=4, width=7), str(other))
    runner = ModelRunner(other, library)
    assert runner.library_nodes == [] and not marker.exists()


def test_the_kernels_own_arrays_are_used_whatever_the_manifest_says(built: tuple[Path, Path],
                                                                    tampered: Callable) -> None:
    def grow(manifest: dict[str, Any]) -> None:
        for kernel in manifest["kernels"]:
            for array in (*kernel["inputs"], *kernel["outputs"]):
                array["shape"] = [4096, 4096]
                array["dtype"] = "f64"

    runner = ModelRunner(built[0], tampered(grow))
    assert len(runner.library_nodes) == 3
    assert_runs_as_onnxruntime(runner, built[0])


@pytest.mark.parametrize(("manifest", "message"), [
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ('{"library": "hl_topk", "shared_library": "libhl_topk.so", "kernels": {"matmul": 1}}', "not a library's manifest"),
    ('{"library": "hl_topk", "shared_library": 7, "kernels": []}', "not a library's manifest"),
    ("not json", "manifest.json: not JSON"),
    (b"\xff\xfe{}", "not UTF-8"),
])
def test_a_malformed_manifest_is_an_error_not_a_traceback(manifest: str | bytes, message: str,
                                                          built: tuple[Path, Path], tmp_path: Path) -> None:
    library = tmp_path / "library"
    shutil.copytree(built[1], library)
    path = library / "manifest.json"
    path.write_bytes(manifest if isinstance(manifest, bytes) else manifest.encode())
    np.savez(tmp_path / "in.npz", **inputs_of(built[0]))
    done = dojo("model", "run", str(built[0]), "--library", str(library), "--inputs", str(tmp_path / "in.npz"),
                "--out", str(tmp_path / "out.npz"))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("dojo model run: error: ") and message in done.stderr


@pytest.mark.parametrize(("field", "value"), [("dtype", "f16"), ("shape", [-4]), ("shape", [2.5]), ("name", 3)])
def test_a_manifest_with_a_wrong_array_is_refused(field: str, value: Any, built: tuple[Path, Path],
                                                  tampered: Callable) -> None:
    library = tampered(lambda m: m["kernels"][0]["inputs"][0].update({field: value}))
    with pytest.raises(RunError, match="not a library's manifest"):
        ModelRunner(built[0], library)


def test_an_input_that_onnxruntime_cannot_take_is_an_error_naming_the_node(tmp_path: Path) -> None:
    """Gather's indices come with the inputs: an index out of range fails in ONNX Runtime, at run time."""
    nodes = [helper.make_node("Gather", ["table", "ids"], ["rows"], name="lookup"),
             helper.make_node("Relu", ["rows"], ["y"], name="relu")]
    table = numpy_helper.from_array(np.ones((4, 3), np.float32), "table")
    graph = helper.make_graph(nodes, "lookup", [helper.make_tensor_value_info("ids", onnx.TensorProto.INT64, [2])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 3])], [table])
    path, library = library_of(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), tmp_path,
                               "hl_lookup")
    runner = ModelRunner(path, library)
    assert runner.run({"ids": np.array([0, 3])})["y"].shape == (2, 3)
    with pytest.raises(RunError, match=r"ONNX Runtime failed to run nodes lookup of hl_lookup\.onnx: .*out of"):
        runner.run({"ids": np.array([0, 99])})


def test_mutated_library_folders_and_inputs_files_are_run_or_refused_without_a_traceback() -> None:
    """bench/fuzz_library.py at a CI's size: manifests, constants and inputs files mutated, and the
    shared library planted outside the folder never loaded."""
    outcomes, failures = fuzz(80)
    assert not failures and outcomes["ran"] and outcomes["rejected"], (outcomes, failures[:5])
