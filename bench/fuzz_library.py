"""Mutated library folders and inputs files fed to `dojo model run`.

A library folder and an inputs file may come from someone else. One of examples/onnx_models.py's
models is imported and built once; each input is a copy of its library folder, or of an inputs
file for it, with one to three mutations:

- the manifest's fields: the shared library named outside the folder (`../`, an absolute path, a
  link inside the folder to a library outside), a kernel's symbol (libc's, another kernel's, none),
  an array's shape, dtype or name, a hash, an emptied or doubled list of kernels, JSON nested deeply;
- the manifest's or constants.npz's bytes flipped or cut short, constants.npz removed;
- the inputs file's bytes flipped or cut short, a member renamed, of another dtype or shape, one
  more or one fewer.

`dojo model run` (in this process) must write the outputs and exit 0, or exit 1 with
`error: ...`; nothing may raise, and the shared library planted beside the folder (whose
constructor leaves a marker file) must never load.

`python bench/fuzz_library.py [COUNT]` tries COUNT inputs (default 600) and writes its section of
bench/results/fuzz.md; tests/onnx/test_hostile_libraries.py runs fewer in CI.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import shutil
import subprocess
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

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnx_models  # noqa: E402

from bench.fuzz_onnx import Outcome, cut_short, flip_bytes  # noqa: E402
from bench.sections import machine, write_section  # noqa: E402
from libgen.onnx.importer import import_model, write_import  # noqa: E402
from server.cli import main as dojo  # noqa: E402

SEED = 29
MODEL = "conv_block"


@dataclass(frozen=True)
class Case:
    """Where `dojo model run` reads from: a built library, its model, an inputs file, and the
    library planted outside it."""

    model: Path
    library: Path
    inputs: Path
    planted: Path
    marker: Path


def prepare(directory: Path) -> Case:
    """The model imported and built (heuristic pass, quickly), an inputs file for it, and a shared
    library outside the folder that leaves `marker` when loaded."""
    model = directory / f"{MODEL}.onnx"
    onnx.save(onnx_models.MODELS[MODEL](**onnx_models.SMALL[MODEL]), str(model))
    files, library = directory / MODEL, directory / f"{MODEL}_lib"
    write_import(import_model(model), files)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = dojo(["library", "build", *map(str, sorted(files.glob("*.dojo"))), "--method", "heuristic",
                     "--budget", "1", "--min-time", "0.01", "--out", str(library), "--name", MODEL])
    if code != 0:
        raise SystemExit(f"building {MODEL}'s library failed ({code})")
    rng = np.random.default_rng(0)
    graph = onnx.load(str(model)).graph
    inputs = directory / "inputs.npz"
    np.savez(inputs, **{i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]
                                                    ).astype(np.float32) for i in graph.input})
    marker, planted = directory / "planted-was-loaded", directory / "planted.so"
    source = directory / "planted.c"
    source.write_text(f'#include <stdio.h>\n__attribute__((constructor)) static void loaded(void) '
                      f'{{ fclose(fopen("{marker}", "w")); }}\nint system(const char *c) {{ return 0; }}\n')
    subprocess.run(["gcc", "-shared", "-fPIC", str(source), "-o", str(planted)], check=True)
    return Case(model, library, inputs, planted, marker)


# -- mutations of a library folder (`folder` a fresh copy) -------------------------------------------------

def _edit_manifest(folder: Path, change: Callable[[dict], None]) -> None:
    """`change` the manifest's fields, where a mutation before left them a manifest's at all."""
    path = folder / "manifest.json"
    try:
        manifest = json.loads(path.read_text())
    except (ValueError, RecursionError):
        return
    kernels = manifest.get("kernels") if isinstance(manifest, dict) else None
    if not isinstance(kernels, list) or not kernels or not all(isinstance(k, dict) for k in kernels):
        return
    change(manifest)
    path.write_text(json.dumps(manifest).replace('"NESTED"', "[" * 5000 + "]" * 5000))


def shared_library_elsewhere(rng: random.Random, folder: Path, case: Case) -> None:
    link = folder / "linked.so"
    choice = rng.choice(["../planted.so", str(case.planted), "linked.so", "", ".", "x" * 300, "libc.so.6"])
    if choice == "linked.so":
        link.symlink_to(case.planted)
    _edit_manifest(folder, lambda m: m.update(shared_library=choice))


def symbol(rng: random.Random, folder: Path, case: Case) -> None:
    def change(manifest: dict) -> None:
        kernels = manifest["kernels"]
        kernel = rng.choice(kernels)
        kernel["symbol"] = rng.choice(["system", "abort", "exit", "", rng.choice(kernels)["symbol"], 42])
    _edit_manifest(folder, change)


def array(rng: random.Random, folder: Path, case: Case) -> None:
    def change(manifest: dict) -> None:
        kernel = rng.choice(manifest["kernels"])
        arrays = kernel[rng.choice(["inputs", "outputs"])]
        if not arrays:
            return
        chosen = rng.choice(arrays)
        field = rng.choice(["shape", "dtype", "name", "drop", "extra"])
        if field == "shape":
            chosen["shape"] = rng.choice([[], [0], [-3], [1 << 40], [*chosen["shape"], 2], chosen["shape"][:-1]])
        elif field == "dtype":
            chosen["dtype"] = rng.choice(["f64", "i32", "f16", "bool", "", 3])
        elif field == "name":
            chosen["name"] = rng.choice(["", "x", "../y", 7])
        elif field == "drop":
            arrays.remove(chosen)
        else:
            arrays.append(dict(chosen))
    _edit_manifest(folder, change)


def kernels(rng: random.Random, folder: Path, case: Case) -> None:
    def change(manifest: dict) -> None:
        choice = rng.choice(["empty", "double", "hash", "unhashed", "nested", "not a list"])
        if choice == "empty":
            manifest["kernels"] = []
        elif choice == "double":
            manifest["kernels"] = manifest["kernels"] * 2
        elif choice == "hash":
            rng.choice(manifest["kernels"])["spec_hash"] = "0" * 64
        elif choice == "unhashed":
            for kernel in manifest["kernels"]:
                kernel.pop("spec_hash", None)
        elif choice == "nested":
            manifest["kernels"] = "NESTED"  # written as lists 5000 deep
        else:
            manifest["kernels"] = {"a": 1}
    _edit_manifest(folder, change)


def _bytes_of(name: str) -> Callable[[random.Random, Path, Case], None]:
    def mutate(rng: random.Random, folder: Path, case: Case) -> None:
        path = folder / name
        if path.exists() and path.stat().st_size:
            path.write_bytes(rng.choice([flip_bytes, cut_short])(rng, path.read_bytes()))
    return mutate


def constants_removed(rng: random.Random, folder: Path, case: Case) -> None:
    (folder / "constants.npz").unlink(missing_ok=True)


BYTES = frozenset({"manifest_bytes", "constants_bytes"})
FOLDER: dict[str, Callable[[random.Random, Path, Case], None]] = {
    "shared_library_elsewhere": shared_library_elsewhere, "symbol": symbol, "array": array, "kernels": kernels,
    "manifest_bytes": _bytes_of("manifest.json"), "constants_bytes": _bytes_of("constants.npz"),
    "constants_removed": constants_removed}


# -- mutations of an inputs file -------------------------------------------------------------------------

def inputs_file(rng: random.Random, given: Path, into: Path) -> str:
    """`given` mutated into `into`; the mutation's name."""
    with np.load(given) as loaded:
        arrays = {name: loaded[name] for name in loaded.files}
    choice = rng.choice(["bytes", "renamed", "dtype", "shape", "extra", "missing", "object"])
    name = rng.choice(sorted(arrays))
    if choice == "bytes":
        into.write_bytes(rng.choice([flip_bytes, cut_short])(rng, given.read_bytes()))
        return choice
    if choice == "renamed":
        arrays[rng.choice(["", "../x", "x" * 300, name.upper() + "_"])] = arrays.pop(name)
    elif choice == "dtype":
        arrays[name] = arrays[name].astype(rng.choice([np.float64, np.int32, np.bool_, np.complex64]))
    elif choice == "shape":
        arrays[name] = rng.choice([arrays[name][..., :1], arrays[name].reshape(-1), np.zeros((0,), np.float32)])
    elif choice == "extra":
        arrays["unexpected"] = np.ones(3, np.float32)
    elif choice == "missing":
        del arrays[name]
    else:
        arrays[name] = np.array([{"a": 1}], dtype=object)
    with into.open("wb") as out:
        np.savez(out, **arrays)
    return choice


def run(case: Case, library: Path, inputs: Path, out: Path) -> Outcome:
    """`dojo model run` in-process: "ran", "rejected", or "failed" (an exception, a rejection without
    `error:`, or the planted library loaded)."""
    stdout, stderr = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            code = dojo(["model", "run", str(case.model), "--library", str(library), "--inputs", str(inputs),
                         "--out", str(out)])
    except Exception as error:  # noqa: BLE001 - any exception is what this looks for
        return Outcome("failed", f"{type(error).__name__}: {error}")
    if case.marker.exists():
        case.marker.unlink()
        return Outcome("failed", "the shared library outside the folder was loaded")
    if code == 0:
        return Outcome("ran")
    first = stderr.getvalue().splitlines()[0] if stderr.getvalue() else ""
    return Outcome("rejected") if code == 1 and "error: " in first else Outcome("failed", f"exit {code}: {first!r}")


def mutants(case: Case, directory: Path, count: int, seed: int = SEED) -> Iterator[tuple[str, Path, Path]]:
    """`count` inputs: each a description, a library folder and an inputs file, one of them mutated."""
    rng = random.Random(seed)
    for number in range(count):
        folder, inputs = case.library, case.inputs
        if rng.random() < 0.7:
            folder = directory / f"lib{number}"
            shutil.copytree(case.library, folder)
            applied = rng.sample(sorted(FOLDER), rng.randint(1, 3))
            for mutation in sorted(applied, key=BYTES.__contains__):  # the fields' before the bytes
                FOLDER[mutation](rng, folder, case)
            what = "folder: " + ", ".join(applied)
        else:
            inputs = directory / f"inputs{number}.npz"
            what = "inputs: " + inputs_file(rng, case.inputs, inputs)
        yield what, folder, inputs


def fuzz(count: int, seed: int = SEED) -> tuple[Counter, list[str]]:
    """The outcomes of `count` mutants, and the first failures described."""
    outcomes: Counter[str] = Counter()
    failures = []
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        case = prepare(directory)
        for what, folder, inputs in mutants(case, directory, count, seed):
            outcome = run(case, folder, inputs, directory / "out.npz")
            outcomes[outcome.kind] += 1
            if outcome.kind == "failed":
                failures.append(f"{what}: {outcome.problem}")
            if folder != case.library:
                shutil.rmtree(folder)
    return outcomes, failures


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 600
    started = time.perf_counter()
    outcomes, failures = fuzz(count)
    elapsed = time.perf_counter() - started
    text = (f"# Library folders and inputs files: `dojo model run` of mutated ones\n\n`python bench/fuzz_library.py "
            f"{count}` on {machine()}, {elapsed:.0f} s: {count} mutants of examples/onnx_models.py's {MODEL} library "
            f"folder ({', '.join(FOLDER)}; one to three each) or of an inputs file for it: {outcomes['ran']} runs, "
            f"{outcomes['rejected']} rejected with `error: ...`, {outcomes['failed']} failures (a traceback, another "
            "exit, or the shared library planted outside the folder loaded).\n")
    if failures:
        text += "\nThe first failures:\n\n" + "\n".join(f"- {f}" for f in failures[:10]) + "\n"
    write_section(ROOT / "bench" / "results" / "fuzz.md", text)
    print(text)


if __name__ == "__main__":
    main()
