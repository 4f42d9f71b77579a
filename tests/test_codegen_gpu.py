"""The CUDA and HIP backends (codegen/gpu.py, codegen/gpukernel.py). There is no
GPU here, so:

- every library kernel at its small shape compiles with nvcc and with hipcc,
  both mapped onto the GPU by legal moves (the top-level nests fused, `:g` on
  the outer scope, `:b` inside, temporaries to `shared` or `stack` where legal)
  and unmapped (everything on the host). Each compiler run spends over a
  second on the runtime's headers, so the programs are compiled together: one
  translation unit per compiler, each program's source verbatim in a namespace
  of its own (the `#include`s, the same for all, once at the top; `#line`
  names the program in an error). The golden kernel is also built alone, as
  the runner builds it.
- the same programs, hand-written mappings for the rarer rules (among them
  the classic matmul with `shared` tiles, as a schedule of moves) and random
  walks of legal moves drawn towards GPU mappings run on the CPU under an
  emulation of the CUDA execution model (tests/gpu_emulator: a thread per GPU
  thread, a barrier per block) built with ThreadSanitizer: they must give the
  interpreter's outputs and race nowhere. Kernels stripped of their barriers
  (softmax's, the staged matmul's) show that the sanitizer sees a missing one.
- the CUDA source of one small mapped kernel is golden:

    UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_codegen_gpu.py
"""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from codegen import generate, get_target
from codegen.build import build
from codegen.gpukernel import digits
from dojo_ir import interpret, load, random_inputs, to_text
from dojo_ir.fuzz import fuzz_shape
from dojo_ir.library import KERNELS
from dojo_ir.moves import apply, find, why_not
from dojo_ir.tree import Program, walk_op_paths
from runner.verify import compare, decode, encode

HERE = Path(__file__).parent
GOLDEN = HERE / "golden" / "codegen"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
EMULATOR = HERE / "gpu_emulator"
LAUNCH = re.compile(r"(\w+)<<<(\d+), (\d+)>>>\((.*)\);")
SANITIZER = {**os.environ, "TSAN_OPTIONS": "halt_on_error=1 exitcode=66"}


def play(program: Program, wanted) -> Program:
    """`program` after every legal move that `wanted` accepts, first found first."""
    while True:
        move = next((m for m in find(program) if wanted(m)), None)
        if move is None:
            return program
        program = apply(program, move)


def on_gpu(program: Program) -> Program:
    """`program` fused and mapped onto the GPU by legal moves."""
    program = play(program, lambda m: m.name == "join_scopes" and m.arg("depth") == 0)
    program = play(program, lambda m: m.name == "map_gpu" and m.arg("kind") == "g" and m.arg("depth") == 0)
    program = play(program, lambda m: m.name == "map_gpu" and m.arg("kind") == "b" and m.arg("depth") == 1)
    program = play(program, lambda m: m.name == "set_location" and m.arg("location") == "shared")
    return play(program, lambda m: m.name == "set_location" and m.arg("location") == "stack")


# The classic shared-memory matmul, as a schedule that replays: 8x8 tiles of
# `c` on a grid of blocks, a thread per element of a tile, and per tile of 8
# of the reduction the tiles of `a` and `b` staged in `shared` memory, copied
# by the block's threads.
STAGED_MATMUL = [
    # tile both nests by 8 in i and j, the tiles outermost, and fuse the tile scopes
    "split_scope(op=c#1, depth=0, factor=8)", "split_scope(op=c#1, depth=2, factor=8)", "swap_scopes(op=c#1, depth=1)",
    "split_scope(op=c#2, depth=0, factor=8)", "split_scope(op=c#2, depth=2, factor=8)", "swap_scopes(op=c#2, depth=1)",
    # the reduction in tiles of 8, the loop over tiles outside the tile's elements
    "split_scope(op=c#2, depth=4, factor=8)", "swap_scopes(op=c#2, depth=3)", "swap_scopes(op=c#2, depth=2)",
    "join_scopes(op=c#1, depth=0)", "join_scopes(op=c#1, depth=1)",
    # copy what a reduction tile reads of `a` and of `b` first: `a_s`, `b_s`, one tile per (i, j, k) tile
    "stage_reads(op=c#2, depth=3, buffer=a)", "stage_reads(op=c#2, depth=3, buffer=b)",
    # a tile stored per (i, j) tile, so that the blocks running them at once do not share one on the heap
    "unreuse_dims(buffer=a_s, dim=0)", "unreuse_dims(buffer=a_s, dim=1)",
    "unreuse_dims(buffer=b_s, dim=0)", "unreuse_dims(buffer=b_s, dim=1)",
    # a block per (i, j) tile; the initialisation, the two copies and the products over its threads
    "map_gpu(op=c#1, depth=0, kind=g)", "map_gpu(op=c#1, depth=1, kind=g)",
    "map_gpu(op=c#1, depth=2, kind=b)", "map_gpu(op=c#1, depth=3, kind=b)",
    "map_gpu(op=a_s, depth=3, kind=b)", "map_gpu(op=a_s, depth=4, kind=b)",
    "map_gpu(op=b_s, depth=3, kind=b)", "map_gpu(op=b_s, depth=4, kind=b)",
    "map_gpu(op=c#2, depth=3, kind=b)", "map_gpu(op=c#2, depth=4, kind=b)",
    # the tiles in the block's shared memory, which each block holds for itself: one tile of each is stored
    "set_location(buffer=a_s, location=shared)", "set_location(buffer=b_s, location=shared)",
    "reuse_dims(buffer=a_s, dim=0)", "reuse_dims(buffer=a_s, dim=1)",
    "reuse_dims(buffer=b_s, dim=0)", "reuse_dims(buffer=b_s, dim=1)",
]

# Hand-written programs and the moves that map them, one for each rule that
# the library kernels' mappings leave out.
CASES = {
    # an operation between two thread scopes: one thread index, two layouts
    "nested_threads": ("""kernel k(x) -> y

x f32 [2, 4, 8] heap
y f32 [2, 4, 8] heap
m f32 [2, 4] heap

2 4 m[{0},{1}] = 0
| | 8 m[{0},{1}] += x[{0},{1},{2}]
| | 8 y[{0},{1},{2}] = x[{0},{1},{2}] - m[{0},{1}] / 8
""", ["map_gpu(op=m#1, depth=0, kind=g)", "map_gpu(op=m#1, depth=1, kind=b)", "map_gpu(op=y, depth=2, kind=w)"]),
    # a loop around a block scope, whose iterations update one element from different threads
    "carried_across_threads": ("""kernel k(x) -> s

x f32 [2, 4, 8] heap
s f32 [2, 11] heap

2 11 s[{0},{1}] = 0
| 4 8 s[{0},{1}+{2}] += x[{0},{1},{2}]
""", ["map_gpu(op=s#1, depth=0, kind=g)", "map_gpu(op=s#1, depth=1, kind=b)", "map_gpu(op=s#2, depth=2, kind=b)"]),
    # host code, a launch in a host loop, a stack buffer in a kernel, `:u` and `:v`
    "host_and_kernel": ("""kernel k(x) -> y

x f32 [3, 4, 8] heap
y f32 [3, 4, 8] heap
c f32 [3] heap
t f32 [3, 4, 8] heap

3 c[{0}] = 0
| 4 8 c[{0}] += x[{0},{1},{2}]
| 4 8 t[{0},{1},{2}] = x[{0},{1},{2}] * c[{0}]
| 4 8 y[{0},{1},{2}] = exp(t[{0},{1},{2}])
""", ["join_scopes(op=t, depth=1)", "reuse_dims(buffer=t, dim=0)", "set_location(buffer=t, location=stack)",
      "map_gpu(op=t, depth=1, kind=g)", "unroll_scope(op=c#2, depth=1)", "vectorize_scope(op=y, depth=2)"]),
    # a `:g` scope that is not grid: a loop in the block, around a block scope
    "grid_scope_in_block": ("""kernel k(x) -> y, z

x f32 [2, 3, 4] heap
y f32 [2] heap
z f32 [2, 3, 4] heap

2 y[{0}] = x[{0},0,0]
| 3 4 z[{0},{1},{2}] = x[{0},{1},{2}] * 2
""", ["map_gpu(op=y, depth=0, kind=g)", "map_gpu(op=z, depth=1, kind=g)", "map_gpu(op=z, depth=2, kind=b)"]),
    # a shared buffer declared in a loop, written by one block scope and read crosswise by the next
    "shared_in_a_loop": ("""kernel k(x) -> y

x f32 [2, 3, 8] heap
y f32 [2, 3, 8] heap
t f32 [2, 3, 8] heap

2 3 8 t[{0},{1},{2}] = x[{0},{1},{2}] * 2
| | 8 y[{0},{1},{2}] = t[{0},{1},7-{2}]
""", ["map_gpu(op=t, depth=0, kind=g)", "map_gpu(op=t, depth=2, kind=b)", "map_gpu(op=y, depth=2, kind=b)",
      "set_location(buffer=t, location=shared)", "reuse_dims(buffer=t, dim=0)"]),
    # the other dtypes: integer division, `abs`, an index as a value; two arrays in one buffer
    "dtypes": ("""kernel k(x, c) -> y, n

x f64 [4, 6] heap
c i32 [6] heap
y f64 [4, 6] heap
n i64 [4] heap
t f64 [4, 6] heap -> a, b

4 n[{0}] = 0
| 6 n[{0}] += abs(c[{1}] - 3) / 2 + {1}
| 6 a[{0},{1}] = x[{0},{1}] * 2
| 6 b[{0},{1}] = max(a[{0},{1}], 0.5)
| 6 y[{0},{1}] = b[{0},{1}] + n[{0}]
""", ["map_gpu(op=n#1, depth=0, kind=g)", "map_gpu(op=a, depth=1, kind=b)", "map_gpu(op=b, depth=1, kind=b)",
      "map_gpu(op=y, depth=1, kind=b)"]),
    # erf (GELU) in f32 and f64: erff and erf, which CUDA and HIP have on the device
    "gelu": ("""kernel k(x) -> y, z

x f32 [4, 32] heap
y f32 [4, 32] heap
z f64 [4, 32] heap

4 32 y[{0},{1}] = 0.5 * x[{0},{1}] * (1 + erf(x[{0},{1}] * 0.70710678))
4 32 z[{0},{1}] = erf(x[{0},{1}])
""", ["map_gpu(op=y, depth=0, kind=g)", "map_gpu(op=y, depth=1, kind=b)", "map_gpu(op=z, depth=0, kind=g)",
      "map_gpu(op=z, depth=1, kind=b)"]),
    # staged `shared` tiles, copied and then read by all of the block's threads in a loop
    "staged_matmul": (KERNELS["matmul"].text(m=32, k=48, n=64), STAGED_MATMUL),
}


def mapped_case(name: str) -> Program:
    text, moves = CASES[name]
    program = load(text)
    for move in moves:
        program = apply(program, move)
    return program


WALKS, STEPS = 16, 24
GPU_MOVES = ("map_gpu", "set_location", "join_scopes", "reuse_dims")


def walk(seed: int) -> Program:
    """A library kernel (at its fuzz shape, whose sizes split) after random
    legal moves: a thread mapping half the time when there is one, else a move
    that helps one along most of the time, else any."""
    rng = random.Random(seed)
    kernel = rng.choice(list(KERNELS))
    program = load(KERNELS[kernel].generate(**fuzz_shape(kernel)))
    for _ in range(STEPS):
        legal = find(program)
        threads = [m for m in legal if m.name == "map_gpu" and m.arg("kind") in ("b", "w")]
        helpful = [m for m in legal if m.name in GPU_MOVES]
        draw = rng.random()
        pool = threads if threads and draw < 0.5 else helpful if helpful and draw < 0.8 else legal
        program = apply(program, rng.choice(pool))
    return program


@pytest.fixture(scope="module")
def programs() -> dict[str, Program]:
    """Every program the module compiles, by a name that is a C++ identifier."""
    found = {}
    for name, kernel in KERNELS.items():
        found[name] = load(kernel.small())
        found[f"{name}_gpu"] = on_gpu(found[name])
    return found | {name: mapped_case(name) for name in CASES} | {f"walk{n}": walk(n) for n in range(WALKS)}


def bundle(sources: dict[str, str]) -> str:
    """The sources as one translation unit (module docstring)."""
    includes, parts = {}, []
    for name, source in sources.items():
        lines = source.splitlines()
        includes.update(dict.fromkeys(line for line in lines if line.startswith("#include")))
        body = [line for line in lines if not line.startswith("#include")]
        parts.append("\n".join([f"namespace {name} {{", f'#line 1 "{name}"', *body, "}"]))
    return "\n\n".join(["\n".join(includes), *parts]) + "\n"


def compiler_or_skip(target: str) -> None:
    if not get_target(target).buildable():
        pytest.skip(f"{get_target(target).compiler[-1]} is not installed (`make install` installs hipcc)")


# -- the real compilers ---------------------------------------------------------------


@pytest.mark.parametrize("target", ["cuda", "hip"])
def test_every_program_compiles(target: str, programs: dict[str, Program], tmp_path: Path) -> None:
    compiler_or_skip(target)
    t = get_target(target)
    source = tmp_path / f"all{'.cu' if target == 'cuda' else '.hip'}"
    source.write_text(bundle({name: generate(p, t) for name, p in programs.items()}))
    command = [*t.compiler, str(source), "-c", "-o", str(tmp_path / "all.o"), *t.flags]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-6000:]


@pytest.mark.parametrize("target", ["cuda", "hip"])
def test_the_golden_kernel_builds_alone(target: str, tmp_path: Path) -> None:
    compiler_or_skip(target)
    binary = build(generate(golden_program(), target), get_target(target), tmp_path)
    assert binary.path.exists()


# -- the emulator -------------------------------------------------------------------

# The programs whose barriers are stripped, to show that the sanitizer sees them missing.
STRIPPED = ("softmax_gpu", "staged_matmul")


@pytest.fixture(scope="module")
def emulator(programs: dict[str, Program], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One binary running every program on the CPU: `BINARY NAME IN OUT REPEATS WARMUP SEED`."""
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed")
    sources = {name: generate(p, "cuda") for name, p in programs.items()}
    for name in STRIPPED:
        sources[f"{name}_without_barriers"] = sources[name].replace("__syncthreads();", "")
        assert sources[f"{name}_without_barriers"] != sources[name]
    emulated = {name: LAUNCH.sub(r"dojo_emulate(\2, \3, [&] { \1(\4); });", s) for name, s in sources.items()}
    dispatch = [f'    if (!strcmp(argv[1], "{name}"))\n        return {name}::main(argc - 1, argv + 1);'
                for name in emulated]
    main = "\n".join(["int main(int argc, char **argv)", "{", *dispatch, "    return 2;", "}"])
    work = tmp_path_factory.mktemp("emulator")
    source = work / "emulated.cpp"
    source.write_text("#include <string.h>\n" + bundle(emulated) + "\n" + main + "\n")
    binary = work / "emulated"
    command = ["g++", "-std=c++20", "-O1", "-fsanitize=thread", "-I", str(EMULATOR), str(source), "-o", str(binary)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-6000:]
    return binary


def emulate(emulator: Path, name: str, program: Program) -> subprocess.CompletedProcess:
    given, taken = emulator.parent / f"{name}.in", emulator.parent / f"{name}.out"
    given.write_bytes(encode(program, random_inputs(program, 3)))
    return subprocess.run([str(emulator), name, str(given), str(taken), "1", "0", "7"], capture_output=True,
                          text=True, timeout=120, env=SANITIZER)


NAMES = [n for k in KERNELS for n in (k, f"{k}_gpu")] + list(CASES) + [f"walk{n}" for n in range(WALKS)]


@pytest.mark.parametrize("name", NAMES)
def test_the_emulated_program_gives_the_interpreters_outputs(name: str, programs: dict[str, Program],
                                                             emulator: Path) -> None:
    program = programs[name]
    result = emulate(emulator, name, program)
    assert result.returncode == 0, result.stderr[-6000:]
    assert len(result.stdout.split()) == 2  # one timed run: `time SECONDS`
    actual = decode(program, (emulator.parent / f"{name}.out").read_bytes())
    verified, worst = compare(program, actual, interpret(program, random_inputs(program, 3)))
    assert verified, f"largest difference {worst}"


@pytest.mark.parametrize("name", STRIPPED)
def test_the_sanitizer_sees_a_missing_barrier(name: str, programs: dict[str, Program], emulator: Path) -> None:
    result = emulate(emulator, f"{name}_without_barriers", programs[name])
    assert result.returncode == 66 and "data race" in result.stderr, result.stderr[-3000:]


# -- the source ---------------------------------------------------------------------


def golden_program() -> Program:
    return on_gpu(load(KERNELS["softmax"].small()))


def test_golden_cuda_source() -> None:
    program = golden_program()
    expected = {GOLDEN / "softmax_gpu.dojo": to_text(program), GOLDEN / "softmax_gpu.cu": generate(program, "cuda")}
    for path, text in expected.items():
        if UPDATE:
            path.write_text(text)
        assert path.read_text() == text, f"{path.name} changed; UPDATE_GOLDEN=1 regenerates it"


@pytest.mark.parametrize("target", ["cuda", "hip"])
def test_erf_is_the_devices_erff_and_erf(target: str) -> None:
    source = generate(mapped_case("gelu"), target)
    kernels = source[source.index("__global__"):]
    assert "(((float)1) + erff(b_x[" in kernels and "= erf((double)b_x[" in kernels


def test_the_dialects_differ_in_the_runtime_and_the_warp_only() -> None:
    program = on_gpu(load(KERNELS["mul"].small()))
    cuda, hip = generate(program, "cuda"), generate(program, "hip")
    assert "#include <cuda_runtime.h>" in cuda and "cudaMallocManaged" in cuda and "hip" not in cuda
    assert "#include <hip/hip_runtime.h>" in hip and "hipMallocManaged" in hip and "cuda" not in hip.lower()
    assert "dojo_kernel_0<<<2, 32>>>" in cuda and "dojo_kernel_0<<<2, 64>>>" in hip
    kernel = cuda[cuda.index("__global__"):cuda.index("static void kernel(")]
    assert kernel.replace("__launch_bounds__(32)", "__launch_bounds__(64)") in hip


def test_thread_variables_are_digits_of_the_thread_index_innermost_fastest() -> None:
    assert digits([1], [8], "thread") == ["const long i1 = thread;"]
    assert digits([1, 3], [8, 4], "thread") == ["const long i1 = thread / 4;", "const long i3 = thread % 4;"]
    assert digits([0, 1, 2], [3, 1, 5], "block") == [
        "const long i0 = block / 5;", "const long i1 = 0;", "const long i2 = block % 5;"]


ELEMENTWISE_IN_A_LOOP = """kernel k(x) -> y

x f32 [2, 4, 8] heap
y f32 [2, 4, 8] heap

2:g 4 8:b y[{0},{1},{2}] = x[{0},{1},{2}] * 2
"""


@pytest.mark.parametrize(("program", "barriers"), [
    # each row: thread 0 reduces, the block uses the result, twice
    (lambda: golden_program(), 3),
    # the same threads initialise, reduce and then hand over to the warp lanes
    (lambda: mapped_case("nested_threads"), 1),
    # before the loop, and in it: the iterations update one element from two threads
    (lambda: mapped_case("carried_across_threads"), 2),
    # between the block scopes, which exchange elements; the loop's iterations touch different ones
    (lambda: mapped_case("shared_in_a_loop"), 1),
    # the iterations of the loop touch different elements
    (lambda: load(ELEMENTWISE_IN_A_LOOP), 0),
    (lambda: mapped_case("grid_scope_in_block"), 0),
    # between the copies and the products, and before the next copies; one before the loop, as a loop's
    # threads are not matched with those of the initialisation before it
    (lambda: mapped_case("staged_matmul"), 3),
])
def test_barriers_stand_where_threads_communicate(program, barriers: int) -> None:
    assert generate(program(), "cuda").count("__syncthreads();") == barriers


def test_the_staged_matmul_copies_its_tiles_to_shared_memory_and_waits_for_them() -> None:
    program = mapped_case("staged_matmul")
    chains = {(op.target.array, *(r.array for r in op.reads)): [s.token for s in chain]
              for _, op, chain in walk_op_paths(program.body)}
    # in each block (`4:g 8:g`), per reduction tile (`6`), each thread copies one element of each tile
    assert chains[("a_s", "a")] == chains[("b_s", "b")] == ["4:g", "8:g", "6", "8:b", "8:b"]
    assert chains[("c", "a_s", "b_s")] == ["4:g", "8:g", "6", "8:b", "8:b", "8"]
    for tile in ("a_s", "b_s"):
        buffer = program.buffer_of[tile]
        assert buffer.location == "shared"
        assert [str(d) for d in buffer.dims] == ["4:1", "8:1", "6:1", "8", "8"]  # one 8x8 tile stored
    source = generate(program, "cuda")
    kernel = source[source.index("__global__"):source.index("static void kernel(")]
    steps = []
    for line in kernel[kernel.index("for (long i2 = 0; i2 < 6;"):].splitlines():
        line = line.strip()
        if line.startswith("__shared__"):
            steps.append("declare")
        elif re.match(r"b_[ab]_s\[.*\] = b_[ab]\[", line):
            steps.append("copy")
        elif "+= b_a_s[" in line:
            steps.append("product")
        elif line == "__syncthreads();":
            steps.append("barrier")
    assert steps == ["declare", "declare", "copy", "copy", "barrier", "product", "barrier"]


def test_a_staged_tile_on_the_heap_keeps_the_blocks_from_running_at_once() -> None:
    text, moves = CASES["staged_matmul"]
    program = load(text)
    for move in moves[: moves.index("unreuse_dims(buffer=a_s, dim=0)")]:
        program = apply(program, move)
    assert "a_s f32 [4:1, 8:1, 6:1, 8, 8] heap" in to_text(program)
    # every block would copy its tile into the one stored tile
    assert why_not(program, "map_gpu(op=c#1, depth=0, kind=g)") is not None


MISPLACED = {
    "a stack buffer on the host and in a kernel": """kernel k(x) -> y

x f32 [4] heap
y f32 [4] heap
t f32 [4] stack

4 t[{0}] = x[{0}]
4:g y[{0}] = t[{0}]
""",
    "a stack buffer under two block scopes": """kernel k(x) -> y

x f32 [2, 4] heap
y f32 [2, 4] heap
t f32 [2, 4] stack

2:g 4:b t[{0},{1}] = x[{0},{1}]
|   4:b y[{0},{1}] = t[{0},{1}]
""",
    "a block of 2048 threads": """kernel k(x) -> y

x f32 [2, 64, 32] heap
y f32 [2, 64, 32] heap

2:g 64:b 32:w y[{0},{1},{2}] = x[{0},{1},{2}]
""",
}


@pytest.mark.parametrize("text", MISPLACED.values(), ids=MISPLACED.keys())
def test_a_mapping_no_gpu_can_run_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        generate(load(text), "cuda")


HOST_BETWEEN_KERNELS = """kernel k(x) -> y

x f32 [3] heap
y f32 [3] heap
s f32 [] heap
t f32 [3] heap
u f32 [3] heap

3:g t[{0}] = x[{0}] * 2
3:g u[{0}] = t[{0}] + 1
s[] = 0
3 s[] += u[{0}]
3:g y[{0}] = u[{0}] / s[]
"""


def test_the_host_waits_for_the_gpu_before_its_own_code_and_before_returning() -> None:
    source = generate(load(HOST_BETWEEN_KERNELS), "cuda")
    host = source[source.index("static void kernel("):source.index("static void dojo_read")]
    steps = [line.strip() for line in host.splitlines() if "dojo_" in line or line.strip().startswith("b_")]
    assert steps == [
        "dojo_kernel_0<<<3, 32>>>(b_x, b_t);", 'dojo_launched("dojo_kernel_0");',
        # the GPU runs the next kernel after this one by itself: no wait
        "dojo_kernel_1<<<3, 32>>>(b_t, b_u);", 'dojo_launched("dojo_kernel_1");', 'dojo_wait("dojo_kernel_1");',
        "b_s[0] = ((float)0);", "b_s[0] += b_u[i0];",
        "dojo_kernel_2<<<3, 32>>>(b_y, b_s, b_u);", 'dojo_launched("dojo_kernel_2");', 'dojo_wait("dojo_kernel_2");',
    ]
