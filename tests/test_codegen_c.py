"""The C backend against the reference interpreter.

Every program here is compiled, run through the harness protocol
(`BINARY IN OUT REPEATS WARMUP SEED`) on the interpreter's inputs, and must
give the interpreter's outputs: every library kernel at its small and its
fuzz shape, a few hundred programs from random walks of legal moves, and
hand-written programs for each scope kind and storage rule. Foreign
architectures run under qemu-user. The golden file of one small tuned kernel
is regenerated with

    UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_codegen_c.py
"""

from __future__ import annotations

import math
import os
import random
import subprocess
from concurrent.futures import ThreadPoolExecutor
from itertools import accumulate
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.passes import heuristic
from codegen import TARGETS, generate, get_target
from codegen.build import BuildError, build
from codegen.c import generate_c, node_code, streamed
from codegen.cvector import pieces, streamable, vector_pieces, widened_tail
from codegen.targets import Target, streaming_threshold_bytes
from codegen.vector_helpers import vector_helper_source
from dojo_ir import interpret, load, random_inputs, to_text
from dojo_ir.analysis import Analysis
from dojo_ir.derivation import advance
from dojo_ir.fuzz import fuzz_shape
from dojo_ir.library import KERNELS
from dojo_ir.moves import apply, find
from dojo_ir.moves.set_location import CAPACITY
from dojo_ir.tree import Program, walk_scopes
from libgen.onnx.random_kernels import random_kernels

NUMPY = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64}
RTOL, ATOL = 1e-4, 1e-5
GOLDEN = Path(__file__).parent / "golden" / "codegen"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
EXAMPLE = Path(__file__).parent.parent / "examples" / "softmax.dojo"
NATIVE = get_target("native")
WORKERS = os.cpu_count() or 1
# more threads than cores, so that `:p` scopes really interleave
THREADS = {**os.environ, "OMP_NUM_THREADS": "4"}


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("build")


# -- running a binary --------------------------------------------------------------


def run_binary(binary: Path, program: Program, inputs: dict[str, np.ndarray], target: Target = NATIVE,
               work: Path | None = None, repeats: int = 1, warmup: int = 0) -> tuple[dict[str, np.ndarray], str]:
    """The outputs (by name, at their shapes) and the stdout of one run."""
    work = work or binary.parent
    tag = f"{binary.name}.{os.getpid()}.{random.getrandbits(32)}"
    given, taken = work / f"{tag}.in", work / f"{tag}.out"
    given.write_bytes(b"".join(np.ascontiguousarray(inputs[name], NUMPY[program.buffer_of[name].dtype]).tobytes()
                               for name in program.inputs))
    command = [*target.launcher, str(binary), str(given), str(taken), str(repeats), str(warmup), "7"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env=THREADS)
    assert result.returncode == 0, result.stderr
    data = taken.read_bytes()
    given.unlink()
    taken.unlink()
    outputs, at = {}, 0
    for name in program.outputs:
        buffer = program.buffer_of[name]
        dtype = np.dtype(NUMPY[buffer.dtype])
        count = int(np.prod(buffer.shape))
        outputs[name] = np.frombuffer(data, dtype, count, at).reshape(buffer.shape)
        at += count * dtype.itemsize
    assert at == len(data), "the output file is longer than the outputs"
    return outputs, result.stdout


def compiled_outputs(program: Program, inputs: dict[str, np.ndarray], cache: Path,
                     target: Target = NATIVE) -> dict[str, np.ndarray]:
    binary = build(generate(program, target), target, cache)
    return run_binary(binary.path, program, inputs, target)[0]


def mismatch(program: Program, inputs: dict[str, np.ndarray], cache: Path, target: Target = NATIVE) -> str | None:
    """None if the compiled program gives the interpreter's outputs."""
    expected = interpret(program, inputs)
    actual = compiled_outputs(program, inputs, cache, target)
    for name in program.outputs:
        if not np.allclose(actual[name], expected[name], rtol=RTOL, atol=ATOL, equal_nan=True):
            return f"output `{name}` differs:\n{to_text(program)}\nC: {actual[name]}\ninterpreter: {expected[name]}"
    return None


def assert_matches(program: Program, cache: Path, inputs: dict[str, np.ndarray] | None = None,
                   target: Target = NATIVE) -> None:
    problem = mismatch(program, random_inputs(program, 0) if inputs is None else inputs, cache, target)
    assert problem is None, problem


def tuned_softmax(**shape: int) -> Program:
    """examples/softmax.dojo's moves played on the softmax kernel at `shape`."""
    program = load(KERNELS["softmax"].text(**shape))
    for move in load(EXAMPLE.read_text()).derivation.moves:
        program = apply(program, move)
    return program


# -- the library and random walks ------------------------------------------------

SHAPES = [pytest.param(name, "small", id=f"{name}-small") for name in KERNELS]
SHAPES += [pytest.param(name, "fuzz", id=f"{name}-fuzz") for name in KERNELS]


@pytest.mark.parametrize(("kernel", "shape"), SHAPES)
def test_library_kernel_matches_the_interpreter(kernel: str, shape: str, cache: Path) -> None:
    text = KERNELS[kernel].small() if shape == "small" else KERNELS[kernel].text(**fuzz_shape(kernel))
    assert_matches(load(text), cache)


def _walk(kernel: str, steps: int, rng: random.Random) -> list[Program]:
    """The programs along one random walk of legal moves from the kernel."""
    program = load(KERNELS[kernel].text(**fuzz_shape(kernel)))
    programs = []
    for _ in range(steps):
        analysis = Analysis(program)
        legal = find(program, analysis)
        if not legal:
            break
        kind = rng.choice(sorted({m.name for m in legal}))
        program = apply(program, rng.choice([m for m in legal if m.name == kind]), analysis)
        programs.append(program)
    return programs


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_random_walk_matches_the_interpreter(kernel: str, cache: Path) -> None:
    # 16 kernels times 16 steps: a few hundred programs in all
    programs = _walk(kernel, 16, random.Random(f"codegen-{kernel}"))
    inputs = random_inputs(programs[0], 1)
    with ThreadPoolExecutor(WORKERS) as pool:
        problems = [p for p in pool.map(lambda p: mismatch(p, inputs, cache), programs) if p]
    assert not problems, problems[0]


@pytest.mark.parametrize("target", ["native", "x86-avx2"])
def test_the_heuristic_pass_on_random_kernels_of_the_onnx_catalogue_matches_the_interpreter(target: str,
                                                                                         cache: Path) -> None:
    # nodes nobody here chose, scheduled as a library build would: odd rows, strides, groups and axes
    chosen = get_target(target)
    if not chosen.runnable():
        pytest.skip(f"{target} does not run here")
    specs = [load(k.text) for k in random_kernels(16, seed=1, smallest=256, largest=256 * 1024, max_flops=4e6)]
    programs = [advance(spec, heuristic(spec, chosen)) for spec in specs]
    with ThreadPoolExecutor(WORKERS) as pool:
        problems = [p for p in pool.map(lambda p: mismatch(p, random_inputs(p, 0), cache, chosen), programs) if p]
    assert not problems, problems[0]


def test_generation_is_deterministic() -> None:
    program = tuned_softmax(m=4, n=32)
    assert generate(program, "native") == generate(load(to_text(program)), NATIVE)


def test_tuned_softmax_example_matches(cache: Path) -> None:
    program = tuned_softmax(m=64, n=512)
    source = generate(program, NATIVE)
    assert "#pragma omp parallel for" in source and "vf32x16" in source
    assert_matches(program, cache)


def test_golden_c_source() -> None:
    program = load((GOLDEN / "softmax.dojo").read_text())
    expected = GOLDEN / "softmax.c"
    source = generate(program, NATIVE)
    if UPDATE:
        expected.write_text(source)
    assert source == expected.read_text()


def test_golden_kernel_is_the_tuned_example() -> None:
    assert load((GOLDEN / "softmax.dojo").read_text()).body == tuned_softmax(m=4, n=32).body


# -- each scope kind and storage rule ----------------------------------------------

VECTORS = """kernel k(x, g, c, n) -> s, p, hi, lo, y, yi, yd

x f32 [3, 16] heap
g f32 [16] heap
c f32 [] heap
n i32 [3, 16] heap
s f32 [3] heap
p f32 [3] heap
hi f32 [3] heap
lo i32 [3] heap
y f32 [3, 16] heap
yi i32 [3, 16] heap
yd f64 [3, 15] heap

3 s[{0}] = 0
| 2 8:v s[{0}] += x[{0},{1}*8+{2}] * g[{1}*8+{2}] + c[]
| p[{0}] = 1
| 4:v p[{0}] *= x[{0},{1}] + 1
| hi[{0}] = -inf
| 16:v hi[{0}] max= x[{0},{1}] / g[{1}]
| lo[{0}] = 100
| 16:v lo[{0}] min= n[{0},{1}] * 3
| 16:v y[{0},{1}] = max(exp(x[{0},{1}]), n[{0},{1}]) + sqrt(abs(g[{1}])) - tanh(log(abs(c[])))
| 16:v yi[{0},{1}] = abs(n[{0},{1}]) / 3 + max(n[{0},{1}], 0) - min(n[{0},{1}], {0})
| 5 2:v yd[{0},{1}*2+{2}+1] = x[{0},{1}*2+{2}+1] * 2
| yd[{0},0] = 0
3 2 8:v y[{0},{1}*8+{2}] max= x[{0},{1}*8+{2}]
3 16:v yi[{0},{1}] min= n[{0},{1}] - 1
"""


def test_vectorized_scopes(cache: Path) -> None:
    """Horizontal reductions of every operator, contiguous reductions,
    broadcasts (of subexpressions too), functions, mixed dtypes, integer
    vectors, unaligned offsets."""
    program = load(VECTORS)
    source = generate(program, NATIVE)
    kernel = source[source.index("static void kernel"):source.index("static void *dojo_alloc")]
    assert kernel.count("for (") == 6  # only the scopes that are not `:v`
    assert "*(const vf32x8 *)&b_g[i1*8]" in kernel  # provably aligned
    assert "*(vf64x2u *)&b_yd[i0*15 + i1*2 + 1]" in kernel  # not
    assert "__builtin_convertvector(*(const vi32x16 *)&b_n[i0*16], vf32x16)" in kernel
    assert "- dojo_splat_f32x16(tanhf(logf(fabsf(b_c[0]))));" in kernel  # what the lanes share, once
    assert_matches(program, cache)


TAILS = """kernel k(x, w) -> y, z, s

x f32 [3, 44] heap
w f32 [10, 3] heap
y f32 [3, 44] heap
z f32 [3, 40] heap
s f32 [10] heap

3 44 y[{0},{1}] = x[{0},{1}] * 2
3 40 z[{0},{1}] = exp(x[{0},{1}]) + {0}
10 s[{0}] = {0}
|  3 s[{0}] += w[{0},{1}] * {1}
"""


def test_split_tails(cache: Path) -> None:
    """Splits by factors that do not divide: rows of 44 and 40 by 16, each tail vectorized too
    (12 lanes in pieces of 8 and 4); 10 rows of two operations by 4 under `:p`, with a deeper
    scope split again down to a tail of one iteration."""
    program = load(TAILS)
    for move in ("split_scope(op=y, depth=1, factor=16)", "vectorize_scope(op=y#1, depth=2)",
                 "vectorize_scope(op=y#2, depth=1)", "split_scope(op=z, depth=1, factor=16)",
                 "vectorize_scope(op=z#1, depth=2)", "vectorize_scope(op=z#2, depth=1)",
                 "split_scope(op=s#1, depth=0, factor=4)", "split_scope(op=s#2, depth=2, factor=2)",
                 "parallelize_scope(op=s#1, depth=0)"):
        program = apply(program, move)
    assert to_text(program).split("\n\n")[-1] == """3 2 16:v y[{0},{1}*16+{2}] = x[{0},{1}*16+{2}] * 2
| 12:v y[{0},{1}+32] = x[{0},{1}+32] * 2
3 2 16:v z[{0},{1}*16+{2}] = exp(x[{0},{1}*16+{2}]) + {0}
| 8:v z[{0},{1}+32] = exp(x[{0},{1}+32]) + {0}
2:p 4 s[{0}*4+{1}] = {0} * 4 + {1}
|   | 1 2 s[{0}*4+{1}] += w[{0}*4+{1},{2}*2+{3}] * ({2} * 2 + {3})
|   | 1 s[{0}*4+{1}] += w[{0}*4+{1},{2}+2] * ({2} + 2)
2 s[{0}+8] = {0} + 8
| 3 s[{0}+8] += w[{0}+8,{1}] * {1}
"""
    source = generate(program, "x86-avx512")
    assert "*(vf32x8u *)&b_y[i0*44 + 32] = " in source and "*(vf32x4 *)&b_y[i0*44 + 40] = " in source
    assert "*(vf32x8 *)&b_z[i0*40 + 32] = " in source
    assert_matches(program, cache)


REDUCTIONS = """kernel k(x, n) -> s, p, hi, lo, ni, t

x f32 [6, 64] heap
n i32 [6, 64] heap
s f32 [6] heap
p f32 [6] heap
hi f32 [6] heap
lo f32 [6] heap
ni i32 [6] heap
t f32 [] heap

6 s[{0}] = 0
| 4 16:v s[{0}] += x[{0},{1}*16+{2}] * 2
| p[{0}] = 1
| 6 8:v p[{0}] *= x[{0},{1}*8+{2}+16] * 0.5 + 1
| hi[{0}] = -inf
| 16 4:v hi[{0}] max= x[{0},{1}*4+{2}]
| lo[{0}] = inf
| 3 16:v lo[{0}] min= x[{0},{1}*16+{2}+8]
| ni[{0}] = 0
| 8 8:v ni[{0}] max= n[{0},{1}*8+{2}] - {1}
t[] = 0
64:v t[] += x[5,{0}]
"""


def test_horizontal_reductions_keep_vector_accumulators(cache: Path) -> None:
    """A `:v` horizontal reduction under a sequential scope accumulates in up
    to four vectors across the scope's iterations, combined as a tree after it;
    elsewhere (`64:v` under a scope with other children, computed in four
    register-wide pieces added lane by lane) the lanes combine as one tree.
    Reassociated, so equal to the sequential order within tolerance."""
    program = load(REDUCTIONS)
    kernel = generate(program, NATIVE)
    kernel = kernel[kernel.index("static void kernel"):]
    assert "vf32x16 acc1_0 = dojo_splat_f32x16(0.0f), acc1_1" in kernel and "acc1_3" in kernel  # 4 | 4
    assert "for (long i1 = 0; i1 < 6; i1 += 3)" in kernel  # 3 accumulators for 6 iterations
    assert "b_x[i0*64 + (i1 + 1)*16]" in kernel
    assert "acc1_0 = dojo_max_f32x4(acc1_0, acc1_1);" in kernel
    assert "b_ni[i0] = dojo_max_i32(b_ni[i0], dojo_hmax_i32x8(acc1_0));" in kernel
    assert kernel.count("b_t[0] += dojo_hadd_f32x16(") == 1  # no loop of its own to keep an accumulator across
    assert "a = a + v[" not in kernel and "a = dojo_max_f32(a, v[" not in kernel  # no lane by lane
    for seed in range(3):
        assert_matches(program, cache, random_inputs(program, seed))
    inputs = random_inputs(program, 0)
    inputs["x"][1, 5] = inputs["x"][2, 40] = inputs["x"][3, 20] = np.nan
    outputs = compiled_outputs(program, inputs, cache)
    expected = interpret(program, inputs)
    for name in ("hi", "lo", "s", "p"):  # NaN propagates through the vector max and min too
        assert np.isnan(outputs[name]).any()
        np.testing.assert_array_equal(np.isnan(outputs[name]), np.isnan(expected[name]))
    assert_matches(program, cache, inputs)


def test_reduction_reading_its_accumulator_is_not_kept_in_vectors(cache: Path) -> None:
    # the value reads the buffer that holds the accumulator: no vector accumulator
    program = load("""kernel k(x) -> y

x f32 [32] heap
y f32 [32] heap

y[0] = 1
2 16:v y[0] += x[{0}*16+{1}] * y[{0}*16+{1}]
""")
    assert "acc0_0" not in generate(program, NATIVE)


MATH = """kernel k(x) -> e, l, t, ed

x f32 [4096] heap
e f32 [4096] heap
l f32 [4096] heap
t f32 [4096] heap
ed f64 [4096] heap

256 16:v e[{0}*16+{1}] = exp(x[{0}*16+{1}])
512 8:v l[{0}*8+{1}] = log(x[{0}*8+{1}])
1024 4:v t[{0}*4+{1}] = tanh(x[{0}*4+{1}])
2048 2:v ed[{0}*2+{1}] = exp(x[{0}*2+{1}])
"""
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 88.72, 88.7228, 88.73, 89, 89.5, 100, 1e30, -1e30, -87.3, -88, -100,
           -103.9, -104, -104.1, -110, 1e-45, 1e-40, 1.17e-38, 1e-30, -1, -1e-30, 1, 2, 0.5, 0.7071, 0.7072, 1e-4,
           -1e-4, 0.6249, 0.6251, -0.6251, 9, 10, -10, 3.4e38, 1e-8, 20, -20]


def math_inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    x = np.concatenate([np.array(SPECIAL, np.float32), rng.uniform(-110, 110, 1500), rng.standard_normal(1500),
                        np.exp(rng.uniform(-100, 88, 4096))])[:4096]
    return {"x": x.astype(np.float32)}


def check_math(outputs: dict[str, np.ndarray], x: np.ndarray) -> None:
    """Within 4 ulp of numpy where the result is a normal float, and numpy's
    special values (0, inf, NaN, subnormals within tolerance) everywhere."""
    with np.errstate(all="ignore"):
        expected = {"e": np.exp(x), "l": np.log(x), "t": np.tanh(x), "ed": np.exp(x.astype(np.float64))}
    for name, want in expected.items():
        got = outputs[name]
        special = ~np.isfinite(want) | (want == 0)
        np.testing.assert_array_equal(got[special], want[special], err_msg=name)
        normal = np.isfinite(want) & (np.abs(want) >= np.finfo(want.dtype).tiny)
        ulps = np.abs(got[normal].astype(np.float64) - want[normal]) / np.spacing(np.abs(want[normal]))
        assert ulps.max() <= 4, (name, x[normal][ulps.argmax()], ulps.max())
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=name)


def test_vector_math_is_accurate_with_special_values(cache: Path) -> None:
    """exp, log and tanh of f32 vectors are polynomials in vector code (no
    scalar call per lane); f64 keeps the libm call per lane."""
    program = load(MATH)
    source = generate(program, NATIVE)
    # always inlined: a target with narrower registers would pass the vector through memory
    assert "static inline __attribute__((always_inline)) vf32x16 dojo_exp_f32x16(vf32x16 x)" in source
    assert "expf(" not in source
    assert "dojo_log_f32x8(vf32x8 x)" in source and "dojo_exp_f32x4" in source  # tanh calls exp
    assert "r[k] = exp(a[k])" in source  # f64
    for helper in ("dojo_exp_f32x4", "dojo_log_f32x8", "dojo_tanh_f32x4"):
        start = source.index(f"{helper}(vf32")
        body = source[start:source.index("\n}\n", start)]
        assert "for (" not in body, f"{helper} picks lanes in a loop, which GCC leaves scalar"
    inputs = math_inputs()
    check_math(compiled_outputs(program, inputs, cache), inputs["x"])


ERF = """kernel k(x) -> v, s, d

x f32 [65568] heap
v f32 [65568] heap
s f32 [65568] heap
d f64 [65568] heap

4098 16:v v[{0}*16+{1}] = erf(x[{0}*16+{1}])
65568 s[{0}] = erf(x[{0}])
32784 2:v d[{0}*2+{1}] = erf(x[{0}*2+{1}])
"""


def erf_inputs() -> dict[str, np.ndarray]:
    """Every 65536th float32 bit pattern (both signs: subnormals, both tails, +-0, +-inf, NaNs),
    the neighbours of the points where the vector erf changes polynomial, and its saturation."""
    sweep = np.arange(0, 1 << 32, 1 << 16, dtype=np.uint64).astype(np.uint32).view(np.float32)
    edges = np.array([0.921875, 2.0, 3.9192059, -0.921875, -2.0, -3.9192059], np.float32)
    near = (edges.view(np.int32)[:, None] + np.arange(-1, 2, dtype=np.int32)).view(np.float32).ravel()
    special = np.array([np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3.9192056, 1e-30, 0.5, -1], np.float32)
    points = np.concatenate([sweep, near, special])
    return {"x": np.concatenate([points, np.linspace(-4, 4, 65568 - len(points), dtype=np.float32)])}


def check_erf(outputs: dict[str, np.ndarray], x: np.ndarray) -> None:
    """The vector and the scalar f32 erf within 1 ulp of the exact value (libm's double erf), exactly
    +-1 where the correctly rounded value is, odd, zeros and NaN kept; f64 is the target's libm erf."""
    with np.errstate(invalid="ignore"):  # the sweep's signalling NaNs
        exact = np.array([math.erf(v) for v in x.astype(np.float64).tolist()])
    rounded = exact.astype(np.float32)
    binade = np.ldexp(1.0, np.maximum(np.frexp(exact)[1] - 24, -149))
    finite = np.isfinite(x)
    for name in ("v", "s"):
        got = outputs[name]
        ulps = np.abs(got[finite].astype(np.float64) - exact[finite]) / binade[finite]
        assert ulps.max() <= 1, (name, x[finite][ulps.argmax()], ulps.max())
        saturated = np.abs(rounded) == 1
        np.testing.assert_array_equal(got[saturated], rounded[saturated], err_msg=name)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(x), err_msg=name)
        zero = x == 0
        np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(x[zero]), err_msg=name)
    # odd: each float of the sweep meets its negation
    half = 1 << 15
    positive, negative = outputs["v"][:half], outputs["v"][half:2 * half]
    np.testing.assert_array_equal(x[half:2 * half], -x[:half])
    np.testing.assert_array_equal(negative.view(np.uint32), positive.view(np.uint32) ^ np.uint32(1 << 31))
    np.testing.assert_allclose(outputs["d"], exact, rtol=1e-15)  # each libm's erf: Arm's differs in the last bit


def test_vector_erf_is_within_one_ulp_with_exact_tails_and_odd(cache: Path) -> None:
    """erf of f32 vectors is a polynomial in vector code (codegen/vmath.py), no libm call per lane;
    the scalar code and f64 call libm's erff and erf."""
    program = load(ERF)
    source = generate(program, NATIVE)
    start = source.index("dojo_erf_f32x16(vf32x16 x)")
    assert "for (" not in source[start:source.index("\n}\n", start)] and "= erff(b_x[i0]);" in source
    assert "r[k] = erf(a[k])" in source  # f64
    inputs = erf_inputs()
    check_erf(compiled_outputs(program, inputs, cache), inputs["x"])


def test_a_comparing_helper_wider_than_the_registers_is_two_of_half_the_lanes() -> None:
    """GCC compares a vector wider than the target's registers lane by lane, with branches; max, min,
    exp, log and tanh of such a vector are two helpers of half as many lanes (down to the register),
    each half through a union. erf compares by integer arithmetic and stays whole."""
    program = load(MATH.replace("exp(x[{0}*16+{1}])", "max(exp(x[{0}*16+{1}]), 0)"))
    avx2, neon = generate(program, get_target("x86-avx2")), generate(program, get_target("arm-neon"))
    assert ("vf32x16 dojo_max_f32x16(vf32x16 a, vf32x16 b) { union { vf32x16 w; vf32x8 h[2]; } ua = {a}, ub = {b}, r; "
            "r.h[0] = dojo_max_f32x8(ua.h[0], ub.h[0]);") in avx2
    assert "vi32x16 m = (a > b)" not in avx2 and "vi32x8 m = (a > b)" in avx2
    assert "r.h[1] = dojo_exp_f32x8(ua.h[1]);" in avx2 and "dojo_exp_f32x16(vf32x16 x)" not in avx2
    assert "r.h[1] = dojo_exp_f32x4(ua.h[1]);" in neon and "r.h[0] = dojo_log_f32x4(ua.h[0]);" in neon
    assert "vi32x16 m = (a > b)" in generate(program, get_target("x86-avx512"))
    erf = generate(load(ERF), get_target("x86-avx2"))
    assert "dojo_erf_f32x16(vf32x16 x)" in erf and "union" not in erf


STREAMING = """kernel k(x, g) -> y, z, u, w

x f32 [8, 64] heap
g f32 [64] heap
y f32 [8, 64] heap
z f32 [8, 64] heap
u f32 [8, 64] heap
w f32 [8, 64] heap

8 4 16:v y[{0},{1}*16+{2}] = exp(x[{0},{1}*16+{2}]) * g[{1}*16+{2}]
8 64 z[{0},{1}] = x[{0},{1}] + 1
8 4 16:v z[{0},{1}*16+{2}] += x[{0},{1}*16+{2}]
8:p 4 16:v u[{0},{1}*16+{2}] = x[{0},{1}*16+{2}] - g[{1}*16+{2}]
8 16 4:v w[{0},{1}*4+{2}] = x[{0},{1}*4+{2}]
4 8 w[{0}*2,{1}] = 0
"""


def test_streaming_stores_only_where_safe(cache: Path) -> None:
    """Outputs written once by a `:v` store, never read, aligned and big
    enough are stored with streaming stores on x86, fenced at the end of each
    thread's share of a `:p` loop and of the kernel; `z` is read back (a
    reduction), `w` written twice. Other targets get ordinary stores."""
    program = load(STREAMING)
    assert streamed(program, 0) == {"y", "u"}
    assert streamed(program, 8 * 64 * 4 + 1) == set()  # smaller than the threshold
    assert streamed(load(KERNELS["add"].text()), streaming_threshold_bytes()) == set()  # not vectorized
    source = generate_c(program, NATIVE if NATIVE.x86 else get_target("x86-avx2"), threshold=0)
    kernel = source[source.index("kernel_nest0("):source.index("static void *dojo_alloc")]
    assert kernel.count("dojo_stream_f32x16(&b_") == 2 and "dojo_stream_f32x16(&b_y[i0*64 + i1*16], " in kernel
    assert ("#pragma omp parallel\n    {\n        #pragma omp for schedule(static) nowait\n"
            "        for (long i0 = 0; i0 < 8; ++i0) {") in kernel
    assert kernel.count("dojo_sfence();") == 2 and kernel.rstrip().endswith("dojo_sfence(); /* the streaming stores "
                                                                         "are done before the caller reads */\n}")
    assert "_mm512_stream_ps" in source and "_mm256_stream_ps" in source  # whichever the target has
    assert "dojo_stream" not in generate_c(program, get_target("arm-neon"), threshold=0)
    assert "dojo_stream" not in generate_c(program, None, threshold=0)
    vectors = load(VECTORS)  # `yd[{0},{1}*2+{2}+1]`: 16 bytes, not aligned to them
    (scope, chain), = [(s, c) for s, c in walk_scopes(vectors.body) if s.kind == "v" and s.size == 2]
    assert not streamable(scope, len(chain), vectors, {0: "i0", 1: "i1"})
    for target in [NATIVE] + [get_target(t) for t in ("x86-avx2", "x86-avx512") if get_target(t).runnable()]:
        inputs = random_inputs(program, 2)
        binary = build(generate_c(program, target, threshold=0), target, cache)
        actual = run_binary(binary.path, program, inputs, target)[0]
        expected = interpret(program, inputs)
        for name in program.outputs:
            np.testing.assert_allclose(actual[name], expected[name], rtol=RTOL, atol=ATOL, equal_nan=True)


def test_big_outputs_stream_by_default() -> None:
    program = load(KERNELS["relu"].text())
    for move in ("split_scope(op=y, depth=1, factor=16)", "vectorize_scope(op=y, depth=2)"):
        program = apply(program, move)
    assert 4096 * 4096 * 4 >= streaming_threshold_bytes() > 0
    assert ("dojo_stream_f32x16(&b_y[" in generate(program, NATIVE)) == NATIVE.x86
    assert "dojo_stream" not in generate(program, "arm-neon")


def test_unrolled_scopes(cache: Path) -> None:
    program = load("""kernel k(x) -> y

x f32 [4, 8] heap
y f32 [4, 8] heap
t f32 [4:1, 8] stack

4:u 8 t[{0},{1}] = exp(x[{0},{1}])
|   8:u y[{0},{1}] = t[{0},{1}] * {1} + {0}
""")
    source = generate(program, NATIVE)
    assert "for (long i0" not in source and "for (long i1" in source
    assert "b_y[31] = b_t[7] * ((float)7) + ((float)3);" in source
    assert source.count("float b_t[8]") == 4  # one per unrolled iteration: its home is the `:u` scope
    assert_matches(program, cache)


def test_parallel_scope_with_private_stack_buffers(cache: Path) -> None:
    program = load("""kernel k(x) -> y

x f32 [64, 8] heap
y f32 [64, 8] heap
t f32 [64:1, 8] stack
u f32 [64:1] stack

64:p u[{0}] = 0
|    8 t[{0},{1}] = exp(x[{0},{1}])
|    8 u[{0}] += t[{0},{1}]
|    8:v y[{0},{1}] = t[{0},{1}] / u[{0}]
""")
    source = generate(program, NATIVE)
    assert ("#pragma omp parallel for schedule(static)\n    for (long i0 = 0; i0 < 64; ++i0) {\n"
            "        kernel_nest0(i0, b_x, b_y);\n    }") in source
    # declared inside the parallel loop's body, the function it calls: each thread has its own
    nest = source[source.index("kernel_nest0(long i0, "):source.index("static void kernel(")]
    assert nest.index("float b_t[8]") < nest.index("float b_u[1]") < nest.index("b_u[0] = ")
    for seed in range(3):
        assert_matches(program, cache, random_inputs(program, seed))


ACCUMULATING_IN_PARALLEL = """kernel k(x, w) -> t

x f32 [7, 32] heap
w f32 [32, 32] heap
t f32 [2, 7, 32] heap
s f32 [1] stack

s[0] = 2
2 7:p 32 32 t[{0},{1},{3}] = 0
| |   | |   t[{0},{1},{3}] += x[{1},{2}] * w[{2},{3}] * s[0]
"""


def vectoriser_notes(source: str, target: Target, directory: Path) -> str:
    """What gcc's vectoriser says of `source` built for `target`."""
    unit = directory / "unit.c"
    unit.write_text(source)
    flags = [f for f in target.flags if f.startswith(("-O", "-m", "-f", "-std"))]
    built = subprocess.run([*target.compiler, "-c", str(unit), "-o", str(directory / "unit.o"), *flags,
                            "-fopt-info-vec-all"], capture_output=True, text=True, check=True)
    return built.stderr


def test_a_parallel_loops_body_keeps_its_restrict_pointers(cache: Path, tmp_path: Path) -> None:
    """The body of a `:p` loop is a function of its own that takes the buffers as `restrict` pointers, the
    loop variables in scope and the local buffers declared outside the loop: inside OpenMP's outlined
    region gcc no longer knows that the accumulation into `t` cannot write `x` or `w`, and versions
    the loop for aliasing (it then reloads and stores `t` at every step of the reduction)."""
    program = load(ACCUMULATING_IN_PARALLEL)
    source = generate(program, NATIVE)
    assert ("static void __attribute__((noinline)) kernel_nest0(long i0, long i1, const float *restrict b_x, "
            "const float *restrict b_w, float *restrict b_t, float *restrict b_s)") in source
    assert ("    for (long i0 = 0; i0 < 2; ++i0) {\n        #pragma omp parallel for schedule(static)\n"
            "        for (long i1 = 0; i1 < 7; ++i1) {\n"
            "            kernel_nest0(i0, i1, b_x, b_w, b_t, b_s);") in source
    assert "versioned for vectorization because of possible aliasing" not in vectoriser_notes(source, NATIVE, tmp_path)
    assert_matches(program, cache)
    # what the editor shows of the loop is its code as written, not the call
    assert "kernel_nest" not in node_code(program, (1,)) and "t[i0*224 + i1*32 + i3] +=" in node_code(program, (1,))


def test_folded_dimensions(cache: Path) -> None:
    program = load("""kernel k(x) -> y

x f32 [4, 8] heap
y f32 [4, 8] heap
t f32 [4:1, 8:3] heap
w f32 [4:2, 8] heap

4 8 t[{0},{1}] = x[{0},{1}] * 2
| | y[{0},{1}] = t[{0},{1}] + 1
4 8 w[{0},{1}] = x[{0},{1}] - 1
| 8 y[{0},{1}] += w[{0},{1}]
""")
    source = generate(program, NATIVE)
    assert "b_t[(i1 % 3)]" in source and "b_w[(i0 % 2)*8 + i1]" in source
    assert "float *restrict b_t" in source and "dojo_alloc((size_t)3 * 4)" in source
    assert_matches(program, cache)


def test_arrays_in_one_buffer_share_storage(cache: Path) -> None:
    program = load("""kernel k(x) -> y, z

x f32 [4, 8] heap
y f32 [4, 8] heap
z f32 [4, 8] heap
t f32 [4, 8] heap -> a, b

4 8 a[{0},{1}] = x[{0},{1}] + 1
4 8 z[{0},{1}] = a[{0},{1}]
4 8 b[{0},{1}] = x[{0},{1}] * 3
4 8 y[{0},{1}] = a[{0},{1}]
""")
    inputs = random_inputs(program, 0)
    outputs = compiled_outputs(program, inputs, cache)
    np.testing.assert_array_equal(outputs["y"], inputs["x"] * np.float32(3))  # `a` reads what `b` wrote
    assert_matches(program, cache, inputs)


def test_integer_arithmetic(cache: Path) -> None:
    """Integer `/` truncates toward zero; index values convert to the dtype;
    mixed dtypes compute in the written array's."""
    program = load("""kernel k(x, d) -> y, z, w

x i32 [16] heap
d i32 [16] heap
y i32 [16] heap
z f32 [16] heap
w i64 [16] heap

16 y[{0}] = (x[{0}] - 9) / (abs(d[{0}]) + 1) + max(x[{0}], d[{0}]) - min(x[{0}], 2) * -x[{0}]
16 z[{0}] = x[{0}] / 2 + {0}
16 w[{0}] = x[{0}] * 1000000000 / 7 + {0} * 3
""")
    inputs = {"x": np.arange(-8, 8, dtype=np.int32), "d": np.arange(16, dtype=np.int32) % 5 - 2}
    outputs = compiled_outputs(program, inputs, cache)
    assert outputs["y"][0] == -5 + -2 - (-8 * 8)  # -17 / 3 truncates to -5 (floor would give -6)
    assert outputs["z"][1] == np.float32(-7 / 2 + 1)
    assert_matches(program, cache, inputs)


NAN_PROGRAM = """kernel k(x) -> y, m, n, mv, nv, q

x f32 [4, 8] heap
y f32 [4, 8] heap
m f32 [4] heap
n f32 [4] heap
mv f32 [4] heap
nv f32 [4] heap
q f32 [4] heap
t f32 [4] heap

4 8 y[{0},{1}] = max(x[{0},{1}], 0) + min(0, x[{0},{1}])
4 m[{0}] = -inf
| 8 m[{0}] max= x[{0},{1}]
| n[{0}] = inf
| 8 n[{0}] min= x[{0},{1}]
| mv[{0}] = -inf
| 8:v mv[{0}] max= x[{0},{1}]
| nv[{0}] = inf
| 8:v nv[{0}] min= x[{0},{1}]
| q[{0}] = t[{0}] + 1
"""


def test_nan_propagates_through_max_and_min(cache: Path) -> None:
    program = load(NAN_PROGRAM)
    x = random_inputs(program, 0)["x"]
    x[0, 0] = x[1, 7] = x[2, 3] = np.nan
    outputs = compiled_outputs(program, {"x": x}, cache)
    for name in ("m", "n", "mv", "nv"):
        np.testing.assert_array_equal(np.isnan(outputs[name]), [True, True, True, False])
    assert np.isnan(outputs["y"][0, 0]) and np.isnan(outputs["q"]).all()  # `t` is never written: poison
    assert_matches(program, cache, {"x": x})


def test_gpu_scopes_run_sequentially(cache: Path) -> None:
    program = load("""kernel mul(x, y) -> z

x f32 [2, 32] heap
y f32 [2, 32] heap
z f32 [2, 32] heap

2:g 8:b 4:v z[{0},{1}*4+{2}] = x[{0},{1}*4+{2}] * y[{0},{1}*4+{2}]
""")
    assert "for (long i1 = 0; i1 < 8; ++i1)" in generate(program, NATIVE)
    assert_matches(program, cache)


def test_unvectorizable_v_scope_falls_back_to_a_loop(cache: Path) -> None:
    # a hand-written `:v` on a strided access is kept as a sequential loop
    program = load("""kernel k(x) -> y

x f32 [4, 4] heap
y f32 [4, 4] heap

4 4:v y[{0},{1}] = x[{1},{0}]
""")
    assert "for (long i1 = 0; i1 < 4; ++i1)" in generate(program, NATIVE)
    assert_matches(program, cache)


def test_staged_tile_of_a_blocked_matmul_matches_the_spec(cache: Path) -> None:
    spec = load("""kernel mm(a, b) -> c

a f32 [6, 16] heap
b f32 [16, 24] heap
c f32 [6, 24] heap

6 24 c[{0},{1}] = 0
6 24 16 c[{0},{1}] += a[{0},{2}] * b[{2},{1}]
""")
    blocked = load("""kernel mm(a, b) -> c

a f32 [6, 16] heap
b f32 [16, 24] heap
c f32 [6, 24] heap

6 24 c[{0},{1}] = 0
4 6 4 24 c[{1},{3}] += a[{1},{0}*4+{2}] * b[{0}*4+{2},{3}]
""")
    staged = apply(blocked, "stage_reads(op=c#2, depth=1, buffer=b)")
    assert "b_s f32 [4:1, 4, 24] heap" in to_text(staged)
    inputs = random_inputs(spec, 0)
    expected = interpret(spec, inputs)["c"]
    for program in (staged, apply(staged, "set_location(buffer=b_s, location=stack)")):
        assert "b_s[" in generate(program, NATIVE)
        actual = compiled_outputs(program, inputs, cache)["c"]
        np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL)


# -- the harness protocol and the build ---------------------------------------------


def test_harness_times_repeats_after_warmup(cache: Path) -> None:
    program = load(KERNELS["add"].small())
    binary = build(generate(program, NATIVE), NATIVE, cache)
    inputs = random_inputs(program, 3)
    outputs, stdout = run_binary(binary.path, program, inputs, repeats=5, warmup=2)
    lines = stdout.splitlines()
    assert len(lines) == 5 and all(line.startswith("time ") and float(line.split()[1]) >= 0 for line in lines)
    np.testing.assert_array_equal(outputs["z"], inputs["x"] + inputs["y"])  # the untimed first run's inputs


def test_harness_refuses_bad_arguments_and_short_input(cache: Path, tmp_path: Path) -> None:
    binary = build(generate(load(KERNELS["add"].small()), NATIVE), NATIVE, cache).path
    assert subprocess.run([str(binary)], capture_output=True).returncode == 2
    short = tmp_path / "in"
    short.write_bytes(b"\0" * 8)
    result = subprocess.run([str(binary), str(short), str(tmp_path / "out"), "1", "0", "0"],
                            capture_output=True, text=True)
    assert result.returncode == 1 and "ends before input" in result.stderr


def test_build_is_cached_and_safe_to_race(tmp_path: Path) -> None:
    source = generate(load(KERNELS["relu"].small()), NATIVE)
    with ThreadPoolExecutor(4) as pool:
        binaries = list(pool.map(lambda _: build(source, NATIVE, tmp_path), range(4)))
    assert len({b.path for b in binaries}) == 1 and binaries[0].path.exists()
    again = build(source, NATIVE, tmp_path)
    assert again.cached and again.compile_s == 0
    assert sorted(p.suffix for p in tmp_path.iterdir()) == ["", ".c"]  # no temporaries left behind


def test_build_error_shows_the_compiler_message(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match="undeclared"):
        build("int main(void) { return nope; }\n", NATIVE, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_targets() -> None:
    assert set(TARGETS) == {"native", "x86-avx2", "x86-avx512", "arm-neon", "riscv-rvv", "cuda", "hip"}
    with pytest.raises(ValueError, match="native, x86-avx2"):
        get_target("vax")
    assert not get_target("cuda").runnable() and get_target("cuda").language == "cuda"
    assert NATIVE.vector_bytes in (16, 32, 64) and NATIVE.cores >= 1
    assert all("-ffast-math" not in t.flags for t in TARGETS.values())


# -- other targets ------------------------------------------------------------------

FOREIGN = [pytest.param(name, id=name) for name in ("x86-avx2", "x86-avx512", "arm-neon", "riscv-rvv")]


@pytest.mark.parametrize("name", FOREIGN)
def test_other_targets_run_correctly(name: str, cache: Path) -> None:
    target = get_target(name)
    if not target.buildable():
        pytest.skip(f"{target.compiler[0]} is not installed (`make` installs the cross compilers)")
    if not target.runnable():
        pytest.skip(f"cannot run {name} binaries here: no {target.launcher[:1] or target.cpu_flags} on this machine")
    for program in (tuned_softmax(m=4, n=32), load(VECTORS), load(NAN_PROGRAM), load(KERNELS["matmul"].small()),
                    load(REDUCTIONS), load(STRIDED)):
        assert_matches(program, cache, target=target)
    inputs = math_inputs()
    check_math(compiled_outputs(load(MATH), inputs, cache, target), inputs["x"])
    inputs = erf_inputs()
    check_erf(compiled_outputs(load(ERF), inputs, cache, target), inputs["x"])
    streaming = load(STREAMING)
    assert ("dojo_stream" in generate_c(streaming, target, threshold=0)) == target.x86
    assert_matches(streaming, cache, target=target)


@given(size=st.integers(2, 512), dtype_bytes=st.sampled_from([4, 8]))
def test_pieces_cover_a_vector_in_register_wide_parts(size: int, dtype_bytes: int) -> None:
    parts = pieces(size, dtype_bytes)
    assert [first for first, _ in parts] == list(accumulate([0] + [lanes for _, lanes in parts[:-1]]))
    assert sum(lanes for _, lanes in parts) == size
    assert all(lanes == 1 or 16 <= lanes * dtype_bytes <= 64 for _, lanes in parts)
    assert [lanes for _, lanes in parts] == sorted((lanes for _, lanes in parts), reverse=True)


@given(size=st.integers(2, 512), dtype_bytes=st.sampled_from([4, 8]))
def test_a_row_ending_in_scalars_ends_in_one_widened_vector(size: int, dtype_bytes: int) -> None:
    parts, tail = vector_pieces(size, dtype_bytes), widened_tail(size, dtype_bytes)
    assert [first for first, _ in parts] == list(accumulate([0] + [lanes for _, lanes in parts[:-1]]))
    if tail is None:
        assert parts == pieces(size, dtype_bytes)
        return
    first, wide = tail
    assert parts[-1] == tail and all(lanes * dtype_bytes == 64 for _, lanes in parts[:-1])
    assert first < size < first + wide and 16 <= wide * dtype_bytes <= 64 and wide & (wide - 1) == 0
    assert 1 in [lanes for _, lanes in pieces(size, dtype_bytes)]
    assert first + wide // 2 < size or wide * dtype_bytes == 16  # the narrowest vector that holds them


WIDENED_AFTER_PIECES = """kernel k(x, w) -> y, c

x f32 [4, 29] heap
w f32 [8, 3] heap
y f32 [8, 27] heap
c f32 [8, 27] heap
t f32 [8, 32] stack

8 27:v t[{0},{1}] = 0
8 4 3 27:v t[{0},{3}] += x[{1},{3}+{2}] * w[{0},{2}]
8 27:v y[{0},{1}] = t[{0},{1}]
8 27:v c[{0},{1}] = 0
8 4 3 27:v c[{0},{3}] += x[{1},{3}+{2}] * w[{0},{2}]
"""


def test_a_row_of_27_lanes_is_a_vector_of_16_and_its_last_11_lanes_as_another(cache: Path) -> None:
    """A Winograd row of 27 outputs: 16 lanes, then 11 as one vector of 16 (not 8 and three
    scalars), whole in the temporary whose rows are padded to 32, moved 11 lanes alone in the
    input's rows of 29 and the output's of 27. A reduction into rows that are not padded keeps
    its pieces of 16 and 8 and scalars, which stay in registers across the reduction."""
    program = load(WIDENED_AFTER_PIECES)
    kernel = generate(program, NATIVE)
    assert "*(vf32x16 *)&b_t[i0*32 + 16] = *(vf32x16 *)&b_t[i0*32 + 16] + (dojo_loadn_f32x16(&b_x[" in kernel
    assert "dojo_storen_f32x16(&b_y[i0*27 + 16], *(const vf32x16 *)&b_t[i0*32 + 16], 11)" in kernel
    assert "*(vf32x8u *)&b_c[i0*27 + 16] += " in kernel and "b_c[i0*27 + 26] += " in kernel
    body = kernel[kernel.index("static void kernel"):kernel.index("static void *dojo_alloc")]
    assert not [line for line in body.splitlines() if "vf32x8" in line and "b_c[" not in line]
    for seed in range(3):
        assert_matches(program, cache, random_inputs(program, seed))


ODD_VECTORS = """kernel k(x, w) -> y, s, c

x f32 [3, 56] heap
w f32 [2] heap
y f32 [3, 54] heap
s f32 [3] heap
c f32 [2, 54] heap

3 54:v y[{0},{1}] = x[{0},{1}+2] * w[1]
3 s[{0}] = -inf
| 54:v s[{0}] max= x[{0},{1}+1]
2 54 c[{0},{1}] = 0
2 3 54:v c[{0},{2}] += x[{1},{2}+{0}] * w[{0}]
"""


def test_vectors_of_54_lanes_compute_in_pieces_what_the_interpreter_does(cache: Path) -> None:
    """A convolution's row of 54 output columns as one `:v` scope: three 16-lane pieces and the
    last 6 lanes as one vector of 8 (moved 6 lanes alone: y's rows hold no more) for plain stores;
    pieces of 16, 4 and two scalars for a horizontal reduction and a vector reduction into rows
    that are not padded."""
    program = load(ODD_VECTORS)
    kernel = generate(program, NATIVE)
    kernel = kernel[kernel.index("static void kernel"):kernel.index("static void *dojo_alloc")]
    assert kernel.count("*(vf32x16u *)&b_y[") == 3 and "dojo_storen_f32x8(&b_y[i0*54 + 48], " in kernel
    assert "*(vf32x4u *)&b_c[i0*54 + 48] += " in kernel and "b_c[i0*54 + 53] += " in kernel
    assert "dojo_hmax_f32x4(" in kernel and "b_x[i0*56 + 54])" in kernel
    for seed in range(3):
        assert_matches(program, cache, random_inputs(program, seed))


STRIDED = """kernel k(x, d, n) -> y, p, s, e, f, t

x f32 [3, 32] heap
d f64 [2, 40] heap
n i32 [3, 31] heap
y f32 [3, 16] heap
p f32 [3, 8] heap
s f32 [3] heap
e f64 [2, 8] heap
f f32 [3, 6] heap
t f32 [3, 3] heap

3 16:v y[{0},{1}] = max(x[{0},{1}*2], x[{0},{1}*2+1]) + n[{0},{1}*2]
3 8:v p[{0},{1}] = x[{0},{1}*3+{0}] * x[{0},{1}*4+1] - x[{0},{1}*2+14]
3 s[{0}] = 0
| 15:v s[{0}] += x[{0},{1}*2+1] * 2
2 8:v e[{0},{1}] = d[{0},{1}*5+{0}]
3 6:v f[{0},{1}] = x[{0},{1}*5]
3 3:v t[{0},{1}] = x[{0},{1}*2+{0}+25]
"""


def test_strided_reads_are_gathered_by_shuffles_of_contiguous_loads(cache: Path) -> None:
    """A read that steps by 2, 3 or 4 per lane (a stride-2 pool's window) is loaded as contiguous
    vectors and shuffled, the last load ending at the last element it needs: `x[{0},{1}*2+1]`
    reads up to the array's last element, 16 lanes from `p` to `p + 30`. Wider strides read element by
    element; horizontal reductions, 6 lanes (a piece and scalars), 3 lanes, f64 and converted i32
    reads agree with the interpreter too."""
    program = load(STRIDED)
    source = generate(program, NATIVE)
    helper = next(line for line in source.splitlines() if line.startswith("static inline vf32x16 dojo_gather2_f32x16"))
    assert "*(const vf32x16u *)p;" in helper and "*(const vf32x16u *)(p + 15)" in helper
    assert "0, 2, 4, 6, 8, 10, 12, 14, 17, 19, 21, 23, 25, 27, 29, 31" in helper
    assert "dojo_gather3_f32x8" in source and "dojo_gather4_f32x8" in source and "dojo_gather2_i32x16" in source
    assert "static inline vf64x8 dojo_gather5_f64x8(const double *p) { return (vf64x8){p[0], p[5]," in source
    kernel = source[source.index("static void kernel"):source.index("static void *dojo_alloc")]
    assert kernel.count("for (") == 6  # the row scopes alone: every `:v` is vectorized
    for seed in range(3):
        assert_matches(program, cache, random_inputs(program, seed))


def _sysfs_caches(root: Path, levels: list[tuple[int, str, str, str]]) -> Path:
    for index, (level, kind, size, shared) in enumerate(levels):
        folder = root / f"index{index}"
        folder.mkdir(parents=True)
        for name, text in (("level", str(level)), ("type", kind), ("size", size), ("shared_cpu_list", shared)):
            (folder / name).write_text(text + "\n")
    return root


def test_a_targets_caches_are_the_hosts_as_sysfs_shows_them(tmp_path: Path, monkeypatch) -> None:
    """A Zen 4 core: 32 KiB of L1 data (the 32 KiB of instructions do not count), 1 MiB of L2 of
    its own, 32 MiB of L3 shared by both cores; a machine whose sysfs shows no caches gets the
    typical sizes."""
    from codegen import targets

    zen4 = _sysfs_caches(tmp_path / "zen4", [(1, "Data", "32K", "0"), (1, "Instruction", "32K", "0"),
                                             (2, "Unified", "1024K", "0"), (3, "Unified", "32768K", "0-1")])
    monkeypatch.setattr(targets, "_CACHE", zen4)
    assert targets.host_caches.__wrapped__() == targets.Caches(32 << 10, 1 << 20, 32 << 20, 1 << 20)
    monkeypatch.setattr(targets, "_CACHE", tmp_path / "none")
    assert targets.host_caches.__wrapped__() == targets.Caches()
    assert get_target("arm-neon").caches == targets.Caches()  # emulated: not this machine's


WIDENED = """kernel k(x, w) -> y

x f32 [4, 9] heap
w f32 [3] heap
y f32 [4, 6] heap
t f32 [4, 8] stack

4 6:v t[{0},{1}] = 0
4 3 6:v t[{0},{2}] += x[{0},{1}+{2}] * w[{1}]
4 6:v y[{0},{1}] = t[{0},{1}] + x[{0},{1}]
"""


@pytest.mark.parametrize("target", ["native", "x86-avx2"])
def test_a_row_of_6_lanes_is_one_vector_of_8(target: str, cache: Path) -> None:
    """A conv row's tail of 6 lanes is one 8-lane vector, not 4 lanes and 2 scalars: whole loads
    where the row holds all 8 lanes for every iteration, whole stores into a temporary's padding
    that no access reaches, and only 6 lanes loaded or stored anywhere else."""
    program = load(WIDENED)
    kernel = generate(program, target)
    kernel = kernel[kernel.index("static void kernel"):kernel.index("static void *dojo_alloc")]
    assert "*(vf32x8 *)&b_t[i0*8] = dojo_splat_f32x8(" in kernel  # stores into t's padding
    assert "dojo_loadn_f32x8(&b_x[i0*9 + i1], 6)" in kernel  # lanes 2 + 8 overrun the row of 9
    assert "*(const vf32x8u *)&b_x[i0*9]" in kernel  # lanes 0 to 7 lie in the row
    assert "dojo_storen_f32x8(&b_y[i0*6], " in kernel  # y is an output: its rows are not padded
    assert "b_y[i0*6 + 5] = " not in kernel
    for seed in range(3):
        assert_matches(program, cache, random_inputs(program, seed), get_target(target))


def test_a_part_of_a_vector_moves_in_one_masked_move_where_avx512_has_one() -> None:
    """dojo_loadn and dojo_storen: AVX-512's masked moves when the compiler targets it (lanes by
    the mask, the rest zero), lane by lane elsewhere; integers and 2-lane vectors always lane by lane."""
    source = vector_helper_source(["dojo_loadn_f32x16", "dojo_storen_f64x4", "dojo_loadn_i32x16", "dojo_loadn_f32x2"])
    assert "#if defined(__AVX512F__)\nstatic inline vf32x16 dojo_loadn_f32x16(const float *p, int n) { return " \
           "__builtin_ia32_loadups512_mask(p, (vf32x16){0}, (unsigned short)((1u << n) - 1)); }\n#else\n" in source
    assert "#if defined(__AVX512VL__)\nstatic inline void dojo_storen_f64x4(double *p, vf64x4 a, int n) { " \
           "__builtin_ia32_storeupd256_mask(p, a, (unsigned char)((1u << n) - 1)); }" in source
    assert source.count("#if") == 2 and source.count("for (int k = 0; k < n; ++k)") == 4


def test_lanes_that_some_access_reaches_are_not_stored_whole(cache: Path) -> None:
    """When an access reaches t's last 2 elements, they are not padding: t's stores keep to the
    6 lanes they compute, and the 1s written there survive them."""
    text = WIDENED.replace("4 6:v t[{0},{1}] = 0", "4 2 t[{0},{1}+6] = 1\n4 6:v t[{0},{1}] = 0")
    program = load(text.replace("t[{0},{1}] + x[{0},{1}]", "t[{0},{1}] + t[{0},7]"))
    kernel = generate(program, NATIVE)
    assert "dojo_storen_f32x8(&b_t[i0*8], " in kernel and "*(vf32x8 *)&b_t[" not in kernel
    assert_matches(program, cache)


def test_a_stack_temporary_as_large_as_the_stack_allows_runs_on_every_thread(cache: Path) -> None:
    """Each OpenMP thread holds its own copy of a `stack` temporary as large as `set_location`
    allows (a matrix product's packed panel): the threads' stacks hold it."""
    elements = CAPACITY["stack"] // 4
    program = load(f"""kernel k(x) -> y

x f32 [4, {elements}] heap
y f32 [4, {elements}] heap
t f32 [4:1, {elements}] stack

4:p {elements} t[{{0}},{{1}}] = x[{{0}},{{1}}] * 2
|   {elements} y[{{0}},{{1}}] = t[{{0}},{{1}}] + 1
""")
    x = random_inputs(program, 0)["x"]
    np.testing.assert_array_equal(compiled_outputs(program, {"x": x}, cache)["y"], x * np.float32(2) + np.float32(1))
