"""The local runner: real builds and runs on this machine, each result checked against its spec."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from codegen import generate
from codegen.build import BuildError, build
from codegen.targets import get_target
from dojo_ir import load, random_inputs, to_text
from dojo_ir.derivation import record
from dojo_ir.library import KERNELS
from dojo_ir.moves import apply
from runner.client import TOKEN_LIMIT, RemoteRunner, RunnerError, connect, read_token
from runner.local import INTERPRET_LIMIT, LocalRunner, iterations, unscheduled
from runner.measure import measure
from runner.result import RunResult

ROOT = Path(__file__).resolve().parent.parent

SOFTMAX = KERNELS["softmax"].text(m=64, n=48)
MOVES = ["join_scopes(op=m#1, depth=0)", "split_scope(op=y, depth=1, factor=8)", "vectorize_scope(op=y, depth=2)",
         "parallelize_scope(op=y, depth=0)"]
# computes e * s where the spec divides: it passes the checker and means something else
WRONG = SOFTMAX.replace("y[{0},{1}] = e[{0},{1}] / s[{0}]", "y[{0},{1}] = e[{0},{1}] * s[{0}]")
DIVIDE_BY_ZERO = """kernel k(x) -> y

x i32 [8] heap
y i32 [8] heap

8 y[{0}] = x[{0}] / 0
"""
# ten billion dependent additions: far longer than any limit the tests set
# 10^13 additions: minutes on any CPU (a Zen 5 ran 10^10 of them in 0.45 s, vectorised)
ENDLESS = """kernel k(x) -> y

x f32 [100] heap
y f32 [100] heap

100 y[{0}] = 0
100 100000 100000000 y[{0}] += x[{0}]
"""


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def runner(cache: Path) -> LocalRunner:
    return LocalRunner(cache_dir=cache, time_limit_s=30)


def derived(spec_text: str, moves: list[str], spec_file: str = "softmax.dojo") -> str:
    program = load(spec_text)
    for move in moves:
        program = apply(program, move)
    return to_text(record(program, moves, spec_file))


def test_a_library_kernel_runs_and_verifies(runner: LocalRunner) -> None:
    result = runner.run(load(SOFTMAX), repeats=5, warmup=1)
    assert result.error is None
    assert result.verified is True and result.ok
    assert result.max_error is not None and result.max_error < 1e-5
    assert len(result.times) == 5 and result.repeats == 5
    assert result.min_s <= result.median_s <= result.max_s
    assert result.target == "native"


def test_a_kernel_with_a_scalar_input_runs_and_verifies(runner: LocalRunner) -> None:
    """A rank-0 input (an ONNX scalar) is passed at rank 0, not as a one-element vector."""
    result = runner.run(load("kernel k(x, s) -> y\n\nx f32 [5] heap\ns f32 [] heap\ny f32 [5] heap\n\n"
                             "5 y[{0}] = x[{0}] * s[]\n"), repeats=2)
    assert result.error is None and result.verified is True


def test_a_derived_program_with_threads_and_vectors_verifies_against_its_spec(runner: LocalRunner) -> None:
    program = load(derived(SOFTMAX, MOVES))
    result = runner.run(program, repeats=3, spec=load(SOFTMAX))
    assert result.ok, result


def test_a_wrong_program_is_measured_but_not_verified(runner: LocalRunner) -> None:
    result = runner.run(load(WRONG), repeats=3, spec=load(SOFTMAX))
    assert result.error is None and len(result.times) == 3
    assert result.verified is False and not result.ok
    assert result.max_error > 1e-3


def test_a_large_spec_is_compiled_for_reference_and_still_catches_a_wrong_program(runner: LocalRunner) -> None:
    spec = load(KERNELS["matmul"].text(m=128, k=130, n=128))
    assert iterations(spec) > INTERPRET_LIMIT
    split = apply(apply(spec, "split_scope(op=c#2, depth=2, factor=10)"), "parallelize_scope(op=c#2, depth=0)")
    assert runner.run(split, repeats=2, spec=spec).ok
    wrong = load(to_text(spec).replace("a[{0},{2}] * b[{2},{1}]", "a[{0},{2}] * b[{2},{0}]"))
    result = runner.run(wrong, repeats=2, spec=spec)
    assert result.error is None and result.verified is False


LONG_SUM = """\
kernel total(x) -> y

x f32 [2, 4194304] heap
y f32 [2] heap
s f32 [2] heap

2 s[{0}] = 0
2 4194304 s[{0}] += x[{0},{1}] + 1000
2 y[{0}] = s[{0}] / 4194304
"""


def test_the_compiled_reference_sums_temporaries_in_f64(runner: LocalRunner) -> None:
    """A long f32 sum taken in order drifts (here by 2%); a vectorized program's partial sums do not,
    and must not fail against a reference less accurate than itself."""
    spec = load(LONG_SUM)
    assert iterations(spec) > INTERPRET_LIMIT  # the reference is the compiled spec
    wide = unscheduled(spec, wide=True)
    assert wide.buffer_of["s"].dtype == "f64" and wide.buffer_of["y"].dtype == "f32"
    assert runner.run(spec, repeats=1, warmup=0, spec=spec).ok  # the spec drifts, and is still right
    moves = ["split_scope(op=s#2, depth=1, factor=16)", "vectorize_scope(op=s#2, depth=2)"]
    program = load(LONG_SUM)
    for move in moves:
        program = apply(program, move)
    result = runner.run(program, repeats=1, warmup=0, spec=spec)
    assert result.ok, (result.error, result.max_error)


LONG_DOT = """\
kernel dot(a, b) -> c

a f32 [4, 2097152] heap
b f32 [2097152] heap
c f32 [4] heap

4 c[{0}] = 0
4 2097152 c[{0}] += a[{0},{1}] * b[{1}]
"""


def test_outputs_reduced_in_place_have_a_wide_reference_too(runner: LocalRunner) -> None:
    """An output that is its own accumulator is summed in an f64 shadow for the wide reference,
    and a program that sums it in blocks (another rounding) is right."""
    spec = load(LONG_DOT)
    wide = unscheduled(spec, wide=True)
    assert wide.buffer_of["c_wide"].dtype == "f64" and wide.buffer_of["c"].dtype == "f32"
    assert to_text(wide).endswith("4 c[{0}] = c_wide[{0}]\n")
    program = spec
    for move in ["split_scope(op=c#2, depth=1, factor=65536)", "accumulate_partial(op=c#2, depth=2)"]:
        program = apply(program, move)
    result = runner.run(program, repeats=1, warmup=0, spec=spec)
    assert result.ok, (result.error, result.max_error)


CANCELLING_SUM = """\
kernel offset(a) -> y

a f32 [64, 256] heap
y f32 [64] heap
s f32 [64] heap

64 s[{0}] = 0
64 256 s[{0}] += a[{0},{1}] + 1000
64 y[{0}] = s[{0}] - 256000
"""


def test_a_small_spec_has_a_wide_reference_too(runner: LocalRunner) -> None:
    """Where a sum of large terms cancels to near zero, summing it in other blocks rounds far above
    the relative tolerance of the small result; the interpreter's f64 reference shows that this is
    rounding, not a wrong program (the heuristic pass's swiglu failed so at 32 x 256 x 64)."""
    spec = load(CANCELLING_SUM)
    assert iterations(spec) <= INTERPRET_LIMIT  # the references come from the interpreter
    program = spec
    for move in ["split_scope(op=s#2, depth=1, factor=16)", "vectorize_scope(op=s#2, depth=2)"]:
        program = apply(program, move)
    result = runner.run(program, repeats=1, warmup=0, spec=spec)
    assert result.ok, (result.error, result.max_error)


def test_a_crashing_kernel_gives_an_error_not_an_exception(runner: LocalRunner) -> None:
    result = runner.run(load(DIVIDE_BY_ZERO), repeats=2)
    assert result.error is not None and "crashed" in result.error and "SIG" in result.error
    assert result.median_s is None and result.verified is None and not result.ok


def test_hitting_the_time_limit_gives_an_error(cache: Path) -> None:
    result = LocalRunner(cache_dir=cache, time_limit_s=1).run(load(ENDLESS), repeats=1, warmup=0)
    assert result.error is not None and "time limit" in result.error
    assert result.median_s is None


def test_a_compiler_past_the_time_limit_is_killed_with_what_it_started(tmp_path: Path) -> None:
    """gcc runs cc1 in a process of its own; killing gcc alone left cc1 compiling for minutes."""
    pid_file = tmp_path / "cc1.pid"
    script = f'[ "$1" = --version ] && exit 0; sleep 60 & echo $! > {pid_file}; wait'
    slow = replace(get_target("native"), compiler=("sh", "-c", script, "sh"))
    with pytest.raises(BuildError, match="did not finish compiling for target native within 1 s"):
        build("int main(void) { return 0; }", slow, cache_dir=tmp_path, time_limit_s=1)
    child = int(pid_file.read_text())
    for _ in range(50):  # the kill is immediate; reaping the orphan takes init a moment
        if not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the compiler's child outlived the time limit")


def test_exceeding_the_memory_limit_gives_an_error(cache: Path) -> None:
    big = """kernel k(x) -> y

x f32 [4] heap
y f32 [4] heap
t f32 [64000000] heap

64000000 t[{0}] = 1
4 y[{0}] = x[{0}] + t[{0}]
"""
    result = LocalRunner(cache_dir=cache, memory_limit_bytes=64 << 20).run(load(big), repeats=1, warmup=0)
    assert result.error is not None and result.median_s is None


def test_a_program_whose_arrays_differ_from_the_spec_is_refused(runner: LocalRunner) -> None:
    other = load(SOFTMAX.replace("x f32 [64, 48]", "x f64 [64, 48]"))
    result = runner.run(other, spec=load(SOFTMAX))
    assert result.error is not None and "`x` is f64" in result.error


def test_invalid_arguments_raise(runner: LocalRunner) -> None:
    with pytest.raises(ValueError, match="unknown target"):
        runner.run(load(SOFTMAX), target="pdp11")
    with pytest.raises(ValueError, match="repeats"):
        runner.run(load(SOFTMAX), repeats=0)


def test_the_cache_makes_the_second_build_fast(tmp_path: Path) -> None:
    target = get_target("native")
    source = generate(load(KERNELS["layernorm1"].text(m=16, n=24)), target)
    first = build(source, target, cache_dir=tmp_path)
    second = build(source, target, cache_dir=tmp_path)
    assert not first.cached and second.cached and second.path == first.path
    again = LocalRunner(cache_dir=tmp_path).run(load(KERNELS["layernorm1"].text(m=16, n=24)), repeats=1)
    assert again.ok and again.compile_s < first.compile_s / 4


def test_the_json_record_has_every_field_and_round_trips(runner: LocalRunner) -> None:
    result = runner.run(load(SOFTMAX), repeats=2)
    data = json.loads(json.dumps(result.to_json()))
    assert {"target", "median_s", "min_s", "max_s", "repeats", "compile_s", "verified", "max_error", "error",
            "times"} <= set(data)
    assert RunResult.from_json(data) == result


def test_measure_repeats_a_fast_kernel_until_the_minimum_time(runner: LocalRunner) -> None:
    exact = measure(runner, load(SOFTMAX), repeats=3, min_time_s=0)
    assert exact.repeats == len(exact.times) == 3
    longer = measure(runner, load(SOFTMAX), repeats=3, min_time_s=0.01)
    assert longer.ok and longer.repeats == len(longer.times) > 3
    assert sum(longer.times) >= 0.01 * 0.5  # the second run's count comes from the first one's median
    crashed = measure(runner, load(DIVIDE_BY_ZERO), repeats=3)
    assert crashed.error is not None


def test_targets_lists_each_with_whether_it_builds_and_runs(runner: LocalRunner) -> None:
    targets = {t["name"]: t for t in runner.targets()}
    assert targets["native"] == {"name": "native", "language": "c", "buildable": True, "runnable": True}
    assert all(set(t) == {"name", "language", "buildable", "runnable"} for t in targets.values())


# -- the command line ----------------------------------------------------------------


def dojo(*args: str, cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "server.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={"PATH": "/usr/bin:/bin", "DOJO_CACHE": str(cache)})


def test_dojo_run_measures_a_derived_file_against_its_spec(tmp_path: Path, cache: Path) -> None:
    (tmp_path / "softmax.dojo").write_text(SOFTMAX)
    (tmp_path / "fast.dojo").write_text(derived(SOFTMAX, MOVES))
    (tmp_path / "wrong.dojo").write_text(WRONG.replace("-> y\n", '-> y\nspec "softmax.dojo"\n', 1))
    human = dojo("run", str(tmp_path / "fast.dojo"), "--repeats", "3", "--min-time", "0", cache=cache)
    assert human.returncode == 0, human.stderr
    assert human.stdout.startswith("softmax on native: median ")
    assert "(min " in human.stdout and "3 runs), compiled in " in human.stdout and "verified (max error" in human.stdout
    as_json = dojo("run", str(tmp_path / "fast.dojo"), "--repeats", "2", "--warmup", "0", "--json", cache=cache)
    measured = json.loads(as_json.stdout)
    assert as_json.returncode == 0 and measured["verified"] is True
    # microseconds each: the default minimum time of 1 s asks for many more repetitions
    assert measured["repeats"] > 100 and "times" not in measured
    wrong = dojo("run", str(tmp_path / "wrong.dojo"), "--repeats", "2", cache=cache)
    assert wrong.returncode == 1 and "NOT verified" in wrong.stdout


def test_dojo_codegen_prints_the_source_and_refuses_an_unknown_target(tmp_path: Path, cache: Path) -> None:
    (tmp_path / "softmax.dojo").write_text(SOFTMAX)
    source = dojo("codegen", str(tmp_path / "softmax.dojo"), cache=cache)
    assert source.returncode == 0 and "int main(" in source.stdout
    unknown = dojo("codegen", str(tmp_path / "softmax.dojo"), "--target", "pdp11", cache=cache)
    assert unknown.returncode == 1 and "unknown target" in unknown.stderr


def test_dojo_run_reports_a_crash_and_an_unreachable_runner(tmp_path: Path, cache: Path) -> None:
    (tmp_path / "k.dojo").write_text(DIVIDE_BY_ZERO)
    crash = dojo("run", str(tmp_path / "k.dojo"), cache=cache)
    assert crash.returncode == 1 and "k on native: failed" in crash.stdout and "crashed" in crash.stdout
    (tmp_path / "token").write_text("secret\n")
    (tmp_path / "token").chmod(0o600)
    remote = dojo("run", str(tmp_path / "k.dojo"), "--runner", "http://127.0.0.1:9", "--token-file",
                  str(tmp_path / "token"), cache=cache)
    assert remote.returncode == 1 and "cannot reach" in remote.stderr


def _token_file(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def test_a_token_file_is_private_and_holds_a_token(tmp_path: Path) -> None:
    assert read_token(_token_file(tmp_path / "t", "  s3cr-et_Token\n")) == "s3cr-et_Token"
    for mode in (0o640, 0o604, 0o620):
        with pytest.raises(ValueError, match="may be read by others.*chmod 600"):
            read_token(_token_file(tmp_path / "t", "secret\n", mode))
    with pytest.raises(ValueError, match=f"more than a token \\({TOKEN_LIMIT} at most\\)"):
        read_token(_token_file(tmp_path / "t", "x" * (TOKEN_LIMIT + 1)))
    with pytest.raises(ValueError, match="does not hold a token"):
        read_token(_token_file(tmp_path / "t", "[default]\naws_secret_access_key = AKIA\n"))
    with pytest.raises(ValueError, match="is empty"):
        read_token(_token_file(tmp_path / "t", "\n"))
    with pytest.raises(ValueError, match="not a regular file"):
        read_token(tmp_path)


def test_a_token_never_crosses_the_network_in_clear(tmp_path: Path) -> None:
    token = _token_file(tmp_path / "t", "secret\n")
    for url in ("http://gpu-box:8470", "http://10.0.0.7:8470", "ftp://gpu-box", "gpu-box:8470"):
        with pytest.raises(RunnerError, match="in clear|not a runner URL"):
            connect(url, str(token))
        with pytest.raises(RunnerError):
            RemoteRunner(url, "secret")
    for url in ("https://gpu-box:8470", "http://127.0.0.1:8470", "http://localhost:8470", "http://[::1]:8470"):
        connect(url, str(token)).close()


def test_a_bad_runner_url_is_refused_before_the_token_file_is_read(tmp_path: Path) -> None:
    readable = _token_file(tmp_path / "t", "secret\n", 0o644)
    with pytest.raises(RunnerError, match="in clear"):
        connect("http://gpu-box:8470", str(readable))
    with pytest.raises(RunnerError, match="chmod 600"):
        connect("https://gpu-box:8470", str(readable))


def test_compare_accepts_what_lies_between_two_references() -> None:
    from runner.verify import compare

    program = load(LONG_SUM)
    low, high = {"y": np.array([100.0, 200.0], np.float32)}, {"y": np.array([102.0, 200.0], np.float32)}
    assert compare(program, {"y": np.array([101.0, 200.0], np.float32)}, low, high)[0]
    assert not compare(program, {"y": np.array([101.0, 200.0], np.float32)}, low)[0]
    # Rounding may land on either side of the exact sum, as far as the widest interval (2.0)
    # in the output, here on the other element too; beyond that it is an error.
    assert compare(program, {"y": np.array([103.0, 201.5], np.float32)}, low, high)[0]
    outside, worst = compare(program, {"y": np.array([105.0, 200.0], np.float32)}, low, high)
    assert not outside and worst == 3.0
    assert not compare(program, {"y": np.array([101.0, 203.0], np.float32)}, low, high)[0]


def test_inputs_are_drawn_once_per_spec_and_evicted_files_go(cache: Path, monkeypatch) -> None:
    import runner.local as local

    drawn = []
    monkeypatch.setattr(local, "random_inputs", lambda spec, seed: drawn.append(spec.name) or random_inputs(spec, seed))
    monkeypatch.setattr(local, "INPUT_CACHE_BYTES", 1)  # room for one spec's inputs at a time
    runner = LocalRunner(cache_dir=cache)
    first, second = load(LONG_SUM), load(LONG_DOT)
    for program in (first, first, second, first):
        assert runner.run(program, repeats=1, warmup=0).ok
    assert drawn == ["total", "dot", "total"]
    assert len(list(runner._input_dir.iterdir())) == 1
