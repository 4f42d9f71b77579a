"""A built library called from C, from numpy and from PyTorch (eager and torch.compile), with its
checks of shapes, dtypes and layout; the header and the manifest."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import threading
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.evaluate import text_hash
from dojo_ir import interpret, load, random_inputs
from dojo_ir.library import KERNELS
from libgen import BuildOptions, KernelTuneOptions, build_library, csource, resolve

TUNED = ["softmax", "layernorm1", "matmul", "swiglu"]


def _import(directory: Path, name: str) -> ModuleType:
    """The library's Python module, imported as `import NAME` would with its directory on the path."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, directory / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The greedy pass's programs: vectors and OpenMP threads, temporaries on the stack."""
    out = tmp_path_factory.mktemp("tuned")
    build_library(resolve(TUNED, base="small"), out, BuildOptions(KernelTuneOptions("greedy", 1, final_min_time_s=0.01),
                                                                 name="lg_tuned"))
    return out


def _specs_only(name: str) -> BuildOptions:
    """A library of the specs as they are: no evaluation past the first."""
    return BuildOptions(KernelTuneOptions("random", 0, final_min_time_s=0.01), name=name)


@pytest.fixture(scope="module")
def specs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The specs as they are (no evaluation past the first): their temporaries are a workspace."""
    out = tmp_path_factory.mktemp("specs")
    build_library(resolve(["softmax", "swiglu"], base="small"), out, _specs_only("lg_specs"))
    return out


def _expected(name: str, seed: int = 3) -> tuple[list[np.ndarray], np.ndarray]:
    spec = load(KERNELS[name].small())
    inputs = random_inputs(spec, seed)
    (output,) = spec.outputs
    return [inputs[n] for n in spec.inputs], interpret(spec, inputs)[output]


def test_the_directory_holds_the_library_and_a_manifest_that_says_how_each_kernel_was_tuned(tuned: Path) -> None:
    manifest = json.loads((tuned / "manifest.json").read_text())
    assert manifest["library"] == "lg_tuned" and manifest["target"] == "native"
    assert (tuned / manifest["shared_library"]).exists() and (tuned / "lg_tuned.h").exists()
    assert [k["name"] for k in manifest["kernels"]] == TUNED
    for kernel in manifest["kernels"]:
        spec = load((tuned / "kernels" / f"{kernel['name']}.spec.dojo").read_text())
        assert kernel["spec_hash"] == text_hash(spec) == text_hash(load(KERNELS[kernel["name"]].small()))
        assert kernel["method"] == "greedy" and kernel["moves"] and kernel["time_s"] > 0 and kernel["spec_s"] > 0
        assert kernel["symbol"] == f"lg_tuned_{kernel['name']}"
        assert kernel["inputs"] == [{"name": n, "dtype": "f32", "shape": list(spec.buffer_of[n].shape)}
                                    for n in spec.inputs]
    # the tuned programs replay from their specs
    from server.cli import main
    assert main(["replay", *(str(tuned / "kernels" / f"{n}.dojo") for n in TUNED)]) == 0
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(tuned / "liblg_tuned.so")], capture_output=True,
                             text=True, check=True).stdout
    exported = {line.split()[-1] for line in symbols.splitlines() if " T " in line}
    assert exported == {f"lg_tuned_{n}" for n in TUNED}  # the entry points only, no helper


_C_TEST = r"""
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include "HEADER"

static float *array(size_t n, float start)
{
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    for (size_t i = 0; i < n; ++i)
        p[i] = start + 0.25f * (float)(i % 7) - 0.5f * (float)(i % 3);
    return p;
}

static void *softmax_rows(void *arg)
{
    float *x = array(15, 0.1f), *y = array(15, 0);
    int bad = 0;
    for (int r = 0; r < 2000; ++r) {
        if (PREFIX_softmax(x, y) != OK)
            bad = 1;
        for (int i = 0; i < 3; ++i) {
            float sum = 0;
            for (int j = 0; j < 5; ++j)
                sum += y[i * 5 + j];
            if (fabsf(sum - 1.0f) > 1e-5f)
                bad = 1;
        }
    }
    free(x);
    free(y);
    *(int *)arg = bad;
    return NULL;
}

int main(void)
{
    float *a = array(12, 1), *b = array(20, -1), *c = array(15, 0);
    if (PREFIX_matmul(a, b, c) != OK)
        return 3;
    for (int i = 0; i < 15; ++i)
        printf("%.9g\n", c[i]);
    if (PREFIX_matmul(a + 1, b, c) != EALIGN)  /* a misaligned pointer is refused */
        return 4;
    pthread_t threads[4];
    int bad[4];
    for (int t = 0; t < 4; ++t)
        pthread_create(&threads[t], NULL, softmax_rows, &bad[t]);
    for (int t = 0; t < 4; ++t) {
        pthread_join(threads[t], NULL);
        if (bad[t])
            return 5;
    }
    return 0;
}
"""


@pytest.mark.parametrize("which", ["tuned", "specs_and_matmul"])
def test_c_calls_the_library_through_its_header_from_several_threads(which: str, tuned: Path,
                                                                    tmp_path_factory: pytest.TempPathFactory,
                                                                    tmp_path: Path) -> None:
    if which == "tuned":
        directory, name = tuned, "lg_tuned"
    else:  # the specs keep their temporaries in a workspace, one per calling thread
        directory, name = tmp_path_factory.mktemp("c_specs"), "lg_cspecs"
        build_library(resolve(["softmax", "matmul"], base="small"), directory, _specs_only(name))
        manifest = json.loads((directory / "manifest.json").read_text())
        assert manifest["kernels"][0]["workspace_bytes"] > 0
    source = tmp_path / "main.c"
    source.write_text(_C_TEST.replace("HEADER", f"{name}.h").replace("PREFIX", name)
                      .replace("!= OK", f"!= {name.upper()}_OK").replace("!= EALIGN", f"!= {name.upper()}_EALIGN"))
    binary = tmp_path / "main"
    subprocess.run(["gcc", "-std=c11", "-O2", str(source), f"-I{directory}", f"-L{directory}", f"-l{name}",
                    f"-Wl,-rpath,{directory}", "-pthread", "-lm", "-o", str(binary)], check=True)
    done = subprocess.run([str(binary)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    values = np.array([float(v) for v in done.stdout.split()], dtype=np.float32).reshape(3, 5)

    def array(n: int, start: float) -> np.ndarray:
        i = np.arange(n)
        return (np.float32(start) + np.float32(0.25) * (i % 7) - np.float32(0.5) * (i % 3)).astype(np.float32)

    expected = array(12, 1).reshape(3, 4).astype(np.float64) @ array(20, -1).reshape(4, 5)
    np.testing.assert_allclose(values, expected, rtol=1e-5, atol=1e-5)


def test_the_header_documents_each_function(tuned: Path) -> None:
    header = (tuned / "lg_tuned.h").read_text()
    assert "int lg_tuned_layernorm1(const float *x, const float *g, const float *b, float *y);" in header
    assert "x: input, f32 [3, 5]" in header and "y: output, f32 [3, 5]" in header
    assert "#define LG_TUNED_EALIGN 2" in header and "64-byte aligned" in header


@pytest.mark.parametrize("name", TUNED)
def test_numpy_calls_each_kernel(name: str, tuned: Path, specs: Path) -> None:
    library = _import(tuned, "lg_tuned")
    inputs, expected = _expected(name)
    np.testing.assert_allclose(getattr(library, name)(*inputs), expected, rtol=1e-4, atol=1e-5)
    if name in ("softmax", "swiglu"):
        np.testing.assert_allclose(getattr(_import(specs, "lg_specs"), name)(*inputs), expected, rtol=1e-4,
                                   atol=1e-5)


def test_numpy_copies_a_misaligned_input_and_returns_aligned_outputs(tuned: Path) -> None:
    library = _import(tuned, "lg_tuned")
    (x,), expected = _expected("softmax")
    raw = np.zeros(x.size + 16, np.float32)
    for shift in range(16):
        view = raw[shift:shift + x.size].reshape(x.shape)
        view[...] = x
        y = library.softmax(view)
        assert y.ctypes.data % 64 == 0
        np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-6)


def test_numpy_refuses_wrong_arguments_with_clear_errors(tuned: Path) -> None:
    library = _import(tuned, "lg_tuned")
    (x,), _ = _expected("softmax")
    with pytest.raises(ValueError, match=r"softmax: argument 1, `x`, must have shape \(3, 5\), not \(5, 3\)"):
        library.softmax(x.reshape(5, 3))
    with pytest.raises(TypeError, match="`x`, must have dtype float32, not float64"):
        library.softmax(x.astype(np.float64))
    with pytest.raises(ValueError, match="`x`, must be C-contiguous"):
        library.softmax(np.asfortranarray(x))
    with pytest.raises(TypeError, match="must be an array of float32 with shape"):
        library.softmax(x.tolist())
    with pytest.raises(TypeError, match=r"layernorm1\(\) takes 3 arrays \(x, g, b\), 1 given"):
        library.layernorm1(x)
    assert "layernorm1(x: f32 [3, 5], g: f32 [5], b: f32 [5]) -> y: f32 [3, 5]" in library.layernorm1.__doc__


def test_python_threads_call_a_kernel_with_a_workspace_at_once(specs: Path) -> None:
    library = _import(specs, "lg_specs")
    inputs, expected = _expected("swiglu")
    failures = []

    def work() -> None:
        for _ in range(300):
            if not np.allclose(library.swiglu(*inputs), expected, rtol=1e-4, atol=1e-5):
                failures.append(1)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures


def test_the_kernels_share_one_workspace_a_thread_grown_for_the_largest(specs: Path) -> None:
    """softmax and swiglu need workspaces of different sizes; called in turn from several threads,
    each thread's one workspace grows to the larger and both stay right. The kernels' units leave
    the allocation to the library's own unit."""
    manifest = json.loads((specs / "manifest.json").read_text())
    sizes = {k["name"]: k["workspace_bytes"] for k in manifest["kernels"]}
    assert len(set(sizes.values())) == 2 and min(sizes.values()) > 0
    assert "aligned_alloc" in (specs / "src" / "_workspace.c").read_text()
    assert not any("aligned_alloc" in (specs / "src" / f"{name}.c").read_text() for name in sizes)
    library = _import(specs, "lg_specs")
    cases = {name: _expected(name) for name in sizes}
    failures = []

    def work(first: int) -> None:
        names = list(cases)[first:] + list(cases)[:first]
        for _ in range(100):
            for name in names:
                inputs, expected = cases[name]
                if not np.allclose(getattr(library, name)(*inputs), expected, rtol=1e-4, atol=1e-5):
                    failures.append(name)

    threads = [threading.Thread(target=work, args=(t % 2,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures


torch = pytest.importorskip("torch")


def test_torch_calls_each_kernel_as_a_custom_operator(tuned: Path) -> None:
    library = _import(tuned, "lg_tuned")
    assert library.ops is torch.ops.lg_tuned
    for name in TUNED:
        inputs, expected = _expected(name)
        result = getattr(torch.ops.lg_tuned, name)(*map(torch.from_numpy, inputs))
        assert isinstance(result, torch.Tensor) and result.dtype == torch.float32
        np.testing.assert_allclose(result.numpy(), expected, rtol=1e-4, atol=1e-5)
    # a view that starts off a 64-byte boundary is copied, not misread
    (x,), expected = _expected("softmax")
    padded = torch.zeros(x.size + 1)
    padded[1:] = torch.from_numpy(x).reshape(-1)
    np.testing.assert_allclose(torch.ops.lg_tuned.softmax(padded[1:].view(3, 5)).numpy(), expected, rtol=1e-4,
                               atol=1e-6)


def test_torch_compile_traces_through_the_operators(tuned: Path) -> None:
    _import(tuned, "lg_tuned")
    ops = torch.ops.lg_tuned
    (x, _, _), _ = _expected("layernorm1")
    g, b = torch.randn(5), torch.randn(5)
    w = torch.randn(5, 4)

    def block(x: torch.Tensor) -> torch.Tensor:
        h = ops.layernorm1(x, g, b) * 2 + 1
        return ops.softmax(h) + ops.matmul(ops.softmax(h)[:, :4].contiguous(), w.T.contiguous())[:, :5]

    eager = block(torch.from_numpy(x))
    counts = {"graphs": 0}

    def backend(graph: torch.fx.GraphModule, example: list) -> object:
        counts["graphs"] += 1
        called = {str(node.target) for node in graph.graph.nodes if node.op == "call_function"}
        assert {"lg_tuned.layernorm1", "lg_tuned.softmax", "lg_tuned.matmul"} <= {t.removesuffix(".default")
                                                                                  for t in called}
        return graph.forward

    compiled = torch.compile(block, backend=backend, fullgraph=True)
    torch.testing.assert_close(compiled(torch.from_numpy(x)), eager)
    assert counts["graphs"] == 1  # one graph, the operators in it: no graph break
    inductor = torch.compile(block, fullgraph=True)
    torch.testing.assert_close(inductor(torch.from_numpy(x)), eager)


def test_torch_refuses_wrong_arguments_eagerly_and_while_tracing(tuned: Path) -> None:
    _import(tuned, "lg_tuned")
    ops = torch.ops.lg_tuned
    with pytest.raises(ValueError, match=r"softmax: argument 1, `x`, must have shape \(3, 5\), not \(3, 4\)"):
        ops.softmax(torch.zeros(3, 4))
    with pytest.raises(TypeError, match="must have dtype float32, not float64"):
        ops.softmax(torch.zeros(3, 5, dtype=torch.float64))
    with pytest.raises(ValueError, match="must be C-contiguous"):
        ops.softmax(torch.zeros(5, 3).T)
    compiled = torch.compile(lambda x: ops.softmax(x), fullgraph=True, dynamic=False)
    with pytest.raises(Exception, match=r"must have shape \(3, 5\), not \(4, 5\)"):
        compiled(torch.zeros(4, 5))


def test_the_module_imports_without_perfdojo(tuned: Path, tmp_path: Path) -> None:
    """The directory is all a user needs: a fresh interpreter with only numpy imports it."""
    script = ("import sys; sys.modules['libgen'] = sys.modules['dojo_ir'] = None; import numpy as np; "
              "import lg_tuned; print(lg_tuned.softmax(np.zeros((3, 5), np.float32)).sum())")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env={"PYTHONPATH": str(tuned)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert abs(float(done.stdout) - 3.0) < 1e-5  # three rows of a uniform softmax


def test_the_transformer_block_example_gives_eager_pytorchs_outputs(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
    try:
        import transformer_block as example
    finally:
        sys.path.pop(0)
    tokens, features, hidden = 8, 16, 24
    example.build(tmp_path, KernelTuneOptions("heuristic", 1, final_min_time_s=0.01), shape=(tokens, features, hidden))
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert [k["name"] for k in manifest["kernels"]] == ["layernorm", "proj", "scores", "softmax", "attend",
                                                         "swiglu", "down"]
    reference = example.TorchBlock(features, hidden).eval()
    ours = example.DojoBlock(reference, torch.ops.block).eval()
    x = torch.randn(tokens, features)
    with torch.inference_mode():
        torch.testing.assert_close(ours(x), reference(x), rtol=1e-4, atol=1e-4)
    compiled = torch.compile(ours, fullgraph=True)
    with torch.inference_mode():
        torch.testing.assert_close(compiled(x), reference(x), rtol=1e-4, atol=1e-4)


@settings(max_examples=60, deadline=None)
@given(description=st.lists(st.sampled_from(["*/", "/*", "\\", "\n", "\r", "??/", "?", "*", "/", " ", "a", "INJECTED"]),
                max_size=12).map("".join))
def test_no_description_reaches_the_header_as_code(description: str, tmp_path_factory: pytest.TempPathFactory
                                                   ) -> None:
    """A spec's first comment and a model's node names are anyone's text: whatever they hold, the
    header's preprocessed text (comments gone, lines spliced, trigraphs on as under -std=c11) keeps
    none of it."""
    array = {"name": "x", "dtype": "f32", "shape": [4]}
    entry = {"name": "k", "symbol": "lg_k", "description": description + " INJECTED", "inputs": [array],
             "outputs": [{**array, "name": "y"}], "target": "native", "method": "naive", "budget": 1, "moves": [],
             "spec_s": 1e-6, "time_s": 1e-6}
    path = tmp_path_factory.mktemp("header") / "lg.h"
    path.write_text(csource.header("lg", "LG", [entry]))
    done = subprocess.run(["gcc", "-std=c11", "-trigraphs", "-E", "-P", "-x", "c", str(path)], capture_output=True,
                          text=True, check=True)
    assert "INJECTED" not in done.stdout and "int lg_k(const float *x, float *y);" in done.stdout
