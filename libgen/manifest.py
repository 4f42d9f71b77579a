"""The records of a library directory: one per tuned kernel, and the manifest of the library.

`kernels/NAME.json` is a `Tuned`: what tuning NAME gave (its spec's hash, the method, budget,
graph, seed and target it was tuned with, the moves, the times) and the peers' times when they
were measured. It is written as soon as the kernel is tuned, so an interrupted build keeps it, and
a later build skips NAME when its record has the same `key`.

`manifest.json` describes the library built from them (docs/library.md has an example):

    {"format": 1, "library": "dojo", "target": "native", "shared_library": "libdojo.so",
     "header": "dojo.h", "module": "dojo.py",
     "kernels": [{"name": "softmax", "symbol": "dojo_softmax", "description": "...",
                  "inputs": [{"name": "x", "dtype": "f32", "shape": [3, 5]}], "outputs": [...],
                  "workspace_bytes": 128, "source": "kernels/softmax.dojo", "spec_hash": "...",
                  "method": "sa", "budget": 50, "moves": [...], "time_s": ..., "peers": {...}, ...}]}

Both are written atomically (runner/files.py). Reading a record that is not valid JSON, or
lacks a field, gives a LibraryError naming the file (and the line and column for bad JSON).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from codegen.c import parameters
from codegen.cexpr import storage_size
from dojo_ir import Program
from dojo_ir.tree import DTYPE_BYTES
from runner.files import write_atomically

from .kernels import LibraryError

FORMAT = 1
ALIGNMENT = 64  # the generated code assumes every buffer is 64-byte aligned (codegen/cvector.py)


@dataclass(frozen=True)
class Array:
    """One argument of a library function: an array of the kernel line."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}


def arrays(program: Program, names: tuple[str, ...]) -> tuple[Array, ...]:
    return tuple(Array(n, program.buffer_of[n].dtype, program.buffer_of[n].shape) for n in names)


def workspace(program: Program) -> tuple[tuple[tuple[str, int], ...], int]:
    """The heap temporaries' buffers with their offsets into the workspace, each 64-byte aligned as
    the generated code assumes, and the workspace's size in bytes: what a library function
    allocates for the kernel."""
    io = {program.buffer_of[n].name for n in program.inputs + program.outputs}
    placed, offset = [], 0
    for buffer in parameters(program):
        if buffer.name in io:
            continue
        placed.append((buffer.name, offset))
        size = storage_size(buffer) * DTYPE_BYTES[buffer.dtype]
        offset += -(-size // ALIGNMENT) * ALIGNMENT
    return tuple(placed), offset


@dataclass(frozen=True)
class Tuned:
    """What tuning one kernel gave; see the module's docstring. Times are in seconds (None when
    unknown); `peers` maps a peer's name to its median time (None when it failed)."""

    name: str
    spec_hash: str
    target: str
    method: str
    budget: int
    graph: str
    seed: int
    moves: tuple[str, ...]
    time_s: float | None
    spec_s: float | None
    evaluations: int
    peers: tuple[tuple[str, float | None], ...] = ()

    @property
    def key(self) -> tuple[str, str, str, int, str, int]:
        """What must match for a build to reuse this result instead of tuning again."""
        return (self.spec_hash, self.target, self.method, self.budget, self.graph, self.seed)

    def to_json(self) -> dict[str, Any]:
        fields = asdict(self)
        return {**fields, "moves": list(self.moves), "peers": dict(self.peers) if self.peers else None}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Tuned:
        return cls(str(d["name"]), str(d["spec_hash"]), str(d["target"]), str(d["method"]), int(d["budget"]),
                   str(d["graph"]), int(d["seed"]), tuple(d["moves"]), d["time_s"], d["spec_s"],
                   int(d["evaluations"]), tuple((d.get("peers") or {}).items()))


def read_json(path: Path) -> Any:
    """The JSON in `path`, or None when there is no such file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        raise LibraryError(f"{path}: error: cannot read: {error}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise LibraryError(f"{path}:{error.lineno}:{error.colno}: error: not valid JSON: {error.msg}") from None


def read_tuned(path: Path) -> Tuned | None:
    """The record at `path`, or None when there is none."""
    data = read_json(path)
    if data is None:
        return None
    try:
        return Tuned.from_json(data)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise LibraryError(f"{path}: error: not a kernel record of `dojo library build` ({error!r}); "
                           "remove it to tune the kernel again") from None


def write_json(path: Path, data: Any) -> None:
    text = json.dumps(data, indent=1)
    # a shape on one line: [3, 5], not one number a line
    text = re.sub(r"\[\s*(-?\d+(?:,\s*-?\d+)*)\s*\]", lambda m: "[" + ", ".join(m[1].replace(",", " ").split()) + "]",
                  text)
    write_atomically(path, (text + "\n").encode())


def entry(tuned: Tuned, program: Program, symbol: str, description: str, source: str) -> dict[str, Any]:
    """The manifest's record of one kernel: the tuning record, the function's interface and where
    its tuned program is."""
    return {"name": tuned.name, "symbol": symbol, "description": description,
            "inputs": [a.to_json() for a in arrays(program, program.inputs)],
            "outputs": [a.to_json() for a in arrays(program, program.outputs)],
            "workspace_bytes": workspace(program)[1], "source": source,
            **{k: v for k, v in tuned.to_json().items() if k != "name"}}
