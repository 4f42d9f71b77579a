"""`LocalRunner`: build a kernel, time it on this machine and verify it against its spec.

    runner = LocalRunner()
    result = runner.run(program, target="native", repeats=10, warmup=2, spec=spec)
    result.median_s, result.verified

One call generates the source (`codegen.generate`), builds it (`codegen.build`, cached by the
source's hash in `cache_dir`) and runs the binary once under the harness protocol: it reads the
inputs, writes the outputs, then runs `warmup` untimed and `repeats` timed repetitions, each on
fresh pseudo-random inputs (section 4.2.3 of the paper: warm-up, new input data per iteration).
`compile_s` is the generation and build time of this call, so it is near zero when the binary came
from the cache; the median, min and max are over the timed repetitions.

Verification. Every measured program is checked against its spec (`spec`, or the program itself):
both see the same inputs (`dojo_ir.random_inputs(spec, SEED)`, drawn and written to a file once per
spec and kept for the next run of that spec, within INPUT_CACHE_BYTES) and the outputs must agree
within the dtype's tolerance (`runner.verify`). The reference outputs are the spec's, computed twice:
with its temporaries in their own precision and in f64, and a program passes between the two (long f32
reductions summed in order drift, and vectorized partial sums land nearer the exact result). The
reference interpreter computes them when the spec is small (at most INTERPRET_LIMIT iterations of its
operations), else the spec compiled for the same target with its scheduling stripped, run once
without timing. They are remembered per spec, so a search that measures many programs of one spec
computes them once.

Isolation. The binary runs in a child process in its own session, so that a time limit kills it and
everything it started; the compiler gets the same time limit (`time_limit_s`), as a program with
large scopes unrolled can keep gcc busy for minutes. `ulimit -v` bounds its address space (emulated
targets get EMULATOR_HEADROOM more for qemu's own mappings; GPU targets none, as their drivers
reserve far more address space than they use) and core dumps are off. A signal, a non-zero exit, a
time limit hit, or outputs of the wrong size or number of times come back as a RunResult with
`error` set: `run` raises only for invalid arguments (an unknown target, a negative count).

Cancellation. `cancel()`, from any thread, stops the runner for good: the harness under way is
killed with everything it started, and `run` returns a RunResult whose error says it was
cancelled, once the process is gone and the CPU locks are released. A compile under way is left to
finish (within the time limit); nothing runs after it.

Noise. Benchmarks never overlap on the same cores: a timed run holds an exclusive `flock` on
`bench.cpuN.lock` in the cache directory for each CPU N of its affinity set
(`runner.affinity.assigned`), taken in ascending order, and a shared one on `bench.lock`, which
whatever needs the whole machine (the roofline, the peers of bench/) takes exclusively. So a
process pinned to CPU 0 and one pinned to CPU 1 (two workers of `dojo library build --ray`, see
libgen/cluster.py) time in parallel, while a run on both CPUs waits for both. Compiles and
reference runs take no lock, so they may overlap a benchmark; runners that share a machine should
share the cache directory. OpenMP gets the target's cores among those CPUs, at
most one thread per CPU, each thread bound to its own CPU (OMP_NUM_THREADS, OMP_PROC_BIND=true,
OMP_PLACES listing those CPUs) so that threads do not migrate between repetitions. Warm-up and the median
take care of cold caches and outliers; slow spells of the host longer than a few repetitions need
more repetitions, which `runner.measure` adds (`dojo run` times at least 1 s). Then repeated
`dojo run`s agree within a few percent (bench/results/runner_noise.md) when nothing else runs; a
parallel kernel needs every core, so another process's load shows in its times at once.
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, replace
from math import prod
from pathlib import Path
from typing import Any

import numpy as np

from codegen import generate
from codegen.build import BuildError, build, default_cache_dir
from codegen.targets import TARGETS, Target, get_target
from dojo_ir import DojoError, Program, interpret, random_inputs, to_text
from dojo_ir.paths import map_ops, without_comments
from dojo_ir.tree import Access, Binary, Buffer, Call, Expr, Node, Op, Ref, Scope, Unary, walk_ops

from .affinity import assigned, on_cpus
from .files import exclusive
from .result import RunResult
from .verify import compare, decode, encode, interface

SEED = 0
# The interpreter runs a spec's loop nests as numpy operations, so this many
# iterations take well under a second; past it, compiling the spec is cheaper.
INTERPRET_LIMIT = 2_000_000
EMULATOR_HEADROOM = 1 << 30  # qemu-user maps its translation cache and itself next to the guest
REFERENCE_CACHE_BYTES = 1 << 30
INPUT_CACHE_BYTES = 1 << 30
_STDERR_TAIL = 600
CANCELLED = "cancelled"


@contextmanager
def timing_lock(cache_dir: Path, cpus: Iterable[int]) -> Iterator[None]:
    """What a timed run on `cpus` holds (the module's docstring): `bench.lock` shared, then each
    CPU's lock, in ascending order so that two runs wanting overlapping CPUs cannot deadlock."""
    with ExitStack() as held:
        held.enter_context(exclusive(cache_dir / "bench.lock", shared=True))
        for cpu in sorted(set(cpus)):
            held.enter_context(exclusive(cache_dir / f"bench.cpu{cpu}.lock"))
        yield


def openmp_environment(target: Target, cpus: Iterable[int]) -> dict[str, str]:
    """OpenMP's settings for a run of `target` on `cpus`: the target's cores, at most one thread
    per CPU, each bound to its CPU."""
    places = sorted(set(cpus))[:max(1, target.cores)]
    return {"OMP_NUM_THREADS": str(len(places)), "OMP_PROC_BIND": "true",
            "OMP_PLACES": ",".join(f"{{{cpu}}}" for cpu in places)}


def iterations(program: Program) -> int:
    """How many times the operations run in all: the interpreter's cost before its vectorisation."""
    return sum(prod(scope.size for scope in chain) for _, chain in walk_ops(program.body))


def unscheduled(program: Program, wide: bool = False) -> Program:
    """The program run sequentially: every scope plain, shared memory on the heap, and with `wide`
    its f32 temporaries in f64, and its f32 outputs computed in f64 shadows that are copied out at
    the end. It computes the same, so its compiled form is a reference that owes nothing to the
    schedule's code paths. Both forms are references because long reductions (a batch norm's mean
    sums 33.5M values, a matmul's dot products 1024) summed in order in f32 drift from the exact
    result, and a vectorized or blocked program's partial sums land elsewhere, often nearer the
    wide result; either is what the spec means."""

    def plain(nodes: tuple[Node, ...]) -> tuple[Node, ...]:
        return tuple(n if isinstance(n, Op) else replace(n, kind="", body=plain(n.body)) for n in nodes)

    bare = without_comments(program)
    io = {bare.buffer_of[name].name for name in bare.inputs + bare.outputs}

    def reference_buffer(buffer: Buffer) -> Buffer:
        buffer = replace(buffer, location="heap") if buffer.location == "shared" else buffer
        return replace(buffer, dtype="f64") if wide and buffer.dtype == "f32" and buffer.name not in io else buffer

    reference = replace(bare, buffers=tuple(reference_buffer(b) for b in bare.buffers), body=plain(bare.body))
    return _wide_outputs(reference) if wide else reference


def _wide_outputs(program: Program) -> Program:
    """`program` with each f32 output that is alone in its buffer (and not an input) computed in an
    f64 heap shadow, copied to the output at the end."""
    taken = set(program.buffer_of) | {b.name for b in program.buffers}
    shadows: dict[str, str] = {}
    buffers = list(program.buffers)
    body = program.body
    for name in program.outputs:
        buffer = program.buffer_of[name]
        if buffer.dtype != "f32" or buffer.array_names != (name,) or name in program.inputs:
            continue
        shadow = next(f"{name}_wide{n or ''}" for n in range(len(taken) + 1) if f"{name}_wide{n or ''}" not in taken)
        taken.add(shadow)
        shadows[name] = shadow
        buffers.append(Buffer(shadow, "f64", buffer.dims, "heap"))
    if not shadows:
        return program

    def rename(expr: Expr) -> Expr:
        if isinstance(expr, Access):
            return replace(expr, array=shadows.get(expr.array, expr.array), index=tuple(map(rename, expr.index)))
        if isinstance(expr, Unary):
            return replace(expr, operand=rename(expr.operand))
        if isinstance(expr, Binary):
            return replace(expr, left=rename(expr.left), right=rename(expr.right))
        if isinstance(expr, Call):
            return replace(expr, args=tuple(map(rename, expr.args)))
        return expr

    body = map_ops(body, lambda op: replace(op, target=rename(op.target), value=rename(op.value)))
    for name, shadow in shadows.items():
        dims = program.buffer_of[name].dims
        refs = tuple(Ref(d) for d in range(len(dims)))
        copy: Node = Op(Access(name, refs), "=", Access(shadow, refs))
        for dim in reversed(dims):
            copy = Scope(dim.size, "", (copy,))
        body += (copy,)
    return replace(program, buffers=tuple(buffers), body=body)


@dataclass(frozen=True)
class _Outcome:
    """What one harness process gave: its outputs and times, or why there are none."""

    outputs: dict[str, np.ndarray] | None
    times: tuple[float, ...]
    error: str | None


class _Recent:
    """Values of recent keys, least recently used first out, within a byte budget (`size` of a
    value); `evict` is told of each value that goes. Shared by threads, so guarded."""

    def __init__(self, max_bytes: int, size: Callable[[Any], int], evict: Callable[[Any], None] = lambda _: None):
        self._max_bytes, self._size, self._evict = max_bytes, size, evict
        self._items: OrderedDict[Any, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get_or_make(self, key: Any, make: Callable[[], Any]) -> Any:
        """The value of `key`, made (once at a time: under the lock) if it is not here."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
            value = self._items[key] = make()
            while len(self._items) > 1 and sum(map(self._size, self._items.values())) > self._max_bytes:
                self._evict(self._items.popitem(last=False)[1])
            return value

    def get(self, key: Any) -> Any:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
            return self._items.get(key)

    def put(self, key: Any, value: Any) -> None:
        self.get_or_make(key, lambda: value)


def _outputs_bytes(references: list[dict[str, np.ndarray]]) -> int:
    return sum(a.nbytes for r in references for a in r.values())


@dataclass(frozen=True)
class _Inputs:
    """A spec's inputs and the harness's input file holding them."""

    arrays: dict[str, np.ndarray]
    file: Path

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays.values())


class LocalRunner:
    def __init__(self, cache_dir: Path | str | None = None, time_limit_s: float = 60,
                 memory_limit_bytes: int = 8 << 30):
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.time_limit_s = time_limit_s
        self.memory_limit_bytes = memory_limit_bytes
        self._references = _Recent(REFERENCE_CACHE_BYTES, _outputs_bytes)
        # Inputs are drawn and written once per spec: for the big ones (a batch norm's 403 MB) that
        # took seconds, longer than the timed runs of an evaluation.
        self._input_dir = Path(tempfile.mkdtemp(prefix="dojo-inputs-"))
        self._remove_inputs = weakref.finalize(self, shutil.rmtree, self._input_dir, True)
        self._inputs = _Recent(INPUT_CACHE_BYTES, lambda i: i.nbytes, lambda i: i.file.unlink(missing_ok=True))
        self._cancelled = False
        self._running: set[subprocess.Popen] = set()
        self._lock = threading.Lock()

    def machine_facts(self, target: str) -> dict[str, Any] | None:
        """What the programs this runner times for `target` run on, for the logs that keep their
        times: this machine's measured limits (`runner.roofline.machine_limits`, measured once and
        cached for the machine), the target's vector width and one core's data caches. None when
        the limits cannot be measured."""
        from .roofline import MachineError, machine_limits

        try:
            machine = machine_limits()
        except MachineError:
            return None
        chosen = get_target(target)
        caches = chosen.caches
        return {**asdict(machine), "vector_bytes": chosen.vector_bytes, "l1d": caches.l1d, "l2": caches.l2,
                "l3": caches.l3}

    def cancel(self) -> None:
        """Kill the harness under way, if any, and run nothing more (see the module's docstring)."""
        with self._lock:
            self._cancelled = True
            for process in self._running:
                _kill(process)

    def close(self) -> None:
        """Remove the input files now; a process ended by a signal never collects this runner."""
        self._remove_inputs()

    def targets(self) -> list[dict[str, Any]]:
        return [{"name": t.name, "language": t.language, "buildable": t.buildable(), "runnable": t.runnable()}
                for t in TARGETS.values()]

    def run(self, program: Program, target: str = "native", repeats: int = 10, warmup: int = 2,
            spec: Program | None = None) -> RunResult:
        if repeats < 1 or warmup < 0:
            raise ValueError(f"repeats must be at least 1 and warmup at least 0, not {repeats} and {warmup}")
        chosen = get_target(target)
        spec = without_comments(spec if spec is not None else program)

        def failed(error: str, compile_s: float = 0.0) -> RunResult:
            return RunResult.failed(chosen.name, error, repeats, compile_s)

        mismatch = _interface_mismatch(program, spec)
        if mismatch is not None:
            return failed(mismatch)
        if not chosen.runnable():
            return failed(f"target {chosen.name} cannot run on this machine")
        started = time.perf_counter()
        try:
            binary = build(generate(program, chosen), chosen, cache_dir=self.cache_dir,
                           time_limit_s=self.time_limit_s)
        except (BuildError, DojoError, ValueError) as error:
            return failed(f"cannot build for {chosen.name}: {error}", time.perf_counter() - started)
        compile_s = time.perf_counter() - started
        if self._cancelled:
            return failed(CANCELLED, compile_s)

        inputs = self._inputs.get_or_make(to_text(spec), lambda: self._draw_inputs(spec))
        with tempfile.TemporaryDirectory(prefix="dojo-run-") as work:
            given = Path(work) / "inputs.bin"
            os.link(inputs.file, given)  # this run's own name for it, which evicting the file leaves
            with timing_lock(self.cache_dir, assigned()):
                outcome = self._execute(binary.path, chosen, program, given, Path(work) / "outputs.bin",
                                        repeats, warmup)
            if outcome.error is not None:
                return failed(outcome.error, compile_s)
            assert outcome.outputs is not None
            expected, problem = self._reference(spec, program, chosen, inputs.arrays, given, Path(work))

        times = outcome.times
        verified, max_error = (None, None) if expected is None else compare(program, outcome.outputs, *expected)
        return RunResult(chosen.name, statistics.median(times), min(times), max(times), repeats, compile_s,
                         verified, max_error, problem, times)

    def _draw_inputs(self, spec: Program) -> _Inputs:
        arrays = random_inputs(spec, SEED)
        handle, name = tempfile.mkstemp(suffix=".bin", dir=self._input_dir)
        with os.fdopen(handle, "wb") as file:
            file.write(encode(spec, arrays))
        return _Inputs(arrays, Path(name))

    def _reference(self, spec: Program, program: Program, target: Target, inputs: dict[str, np.ndarray],
                   given: Path, work: Path) -> tuple[list[dict[str, np.ndarray]] | None, str | None]:
        """The spec's outputs on `inputs`, with its temporaries in their own precision and in f64
        (a program is right between them), from the interpreter or from the compiled spec; or None
        and why they could not be computed."""
        small = iterations(spec) <= INTERPRET_LIMIT
        key = (to_text(spec), "interpreter" if small else target.name)
        cached = self._references.get(key)
        if cached is not None:
            return cached, None
        if small:
            references = [interpret(unscheduled(spec, wide), inputs) for wide in (False, True)]
        else:
            references = []
            for wide in (False, True):
                sequential = unscheduled(spec, wide)
                try:
                    binary = build(generate(sequential, target), target, cache_dir=self.cache_dir,
                                   time_limit_s=self.time_limit_s)
                except (BuildError, DojoError, ValueError) as error:
                    return None, f"cannot build the spec for reference outputs: {error}"
                outcome = self._execute(binary.path, target, sequential, given, work / "reference.bin", 0, 0)
                if outcome.error is not None:
                    return None, f"the spec, run for reference outputs, failed: {outcome.error}"
                assert outcome.outputs is not None
                references.append(outcome.outputs)
        self._references.put(key, references)
        return references, None

    def _execute(self, binary: Path, target: Target, program: Program, given: Path, written: Path,
                 repeats: int, warmup: int) -> _Outcome:
        """Run the harness once in a contained child process and read what it wrote."""
        command = [*target.launcher, str(binary), str(given), str(written), str(repeats), str(warmup), str(SEED)]
        limits = "ulimit -c 0"
        if target.language == "c":
            address_space = self.memory_limit_bytes + (EMULATOR_HEADROOM if target.launcher else 0)
            limits += f" && ulimit -v {address_space // 1024}"
        cpus = assigned()
        environment = os.environ | openmp_environment(target, cpus)
        # the shell sets the limits and then becomes the harness, so no Python runs between fork and exec
        with self._lock:
            if self._cancelled:
                return _Outcome(None, (), CANCELLED)
            with on_cpus(cpus):  # else the harness inherits this thread's affinity, which OpenMP may have narrowed
                process = subprocess.Popen(["/bin/sh", "-c", f'{limits} && exec "$@"', "sh", *command],
                                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                           env=environment, cwd=given.parent, start_new_session=True)
            self._running.add(process)
        try:
            stdout, stderr = process.communicate(timeout=self.time_limit_s)
        except subprocess.TimeoutExpired:
            _kill(process)
            process.communicate()
            return _Outcome(None, (), f"time limit exceeded: still running after {self.time_limit_s:g} s, killed")
        finally:
            with self._lock:
                self._running.discard(process)
        if self._cancelled:
            return _Outcome(None, (), CANCELLED)
        detail = _tail(stderr)
        if process.returncode < 0:
            number = -process.returncode
            name = signal.Signals(number).name
            return _Outcome(None, (), f"crashed: killed by {name} ({signal.strsignal(number)}){detail}")
        if process.returncode != 0:
            return _Outcome(None, (), f"exited with status {process.returncode}{detail}")
        times = _times(stdout.decode(errors="replace"))
        if times is None or len(times) != repeats:
            return _Outcome(None, (), f"bad output: expected {repeats} `time SECONDS` lines on standard output")
        try:
            outputs = decode(program, written.read_bytes())
        except (OSError, ValueError) as error:
            return _Outcome(None, (), f"bad output: {error}")
        return _Outcome(outputs, times, None)


def _kill(process: subprocess.Popen) -> None:
    """Kill the harness's session: the harness and whatever it started (an emulator, OpenMP's threads)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:  # it has ended and been reaped
        pass


def _interface_mismatch(program: Program, spec: Program) -> str | None:
    if (program.inputs, program.outputs) != (spec.inputs, spec.outputs):
        return "the program's kernel line differs from its spec's: it must read and write the same arrays"
    names = program.inputs + program.outputs
    for mine, theirs in zip(interface(program, names), interface(spec, names), strict=True):
        if mine != theirs:
            return f"`{mine[0]}` is {mine[1]} {list(mine[2])} here but {theirs[1]} {list(theirs[2])} in the spec"
    return None


def _times(stdout: str) -> tuple[float, ...] | None:
    """The `time SECONDS` lines; None if one of them is not a number."""
    times = []
    for line in stdout.splitlines():
        word, _, value = line.partition(" ")
        if word == "time":
            try:
                times.append(float(value))
            except ValueError:
                return None
    return tuple(times)


def _tail(stderr: bytes) -> str:
    text = stderr.decode(errors="replace").strip()
    if not text:
        return ""
    return f": {'...' if len(text) > _STDERR_TAIL else ''}{text[-_STDERR_TAIL:]}"
