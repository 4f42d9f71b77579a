"""A library of kernels tuned by PerfDojo, for numpy and PyTorch.

`dojo library build` copies this code into the library's directory as NAME.py (NAME the library's
name, `dojo` by default) with three lines at the end that load the library beside it: its
`manifest.json` and shared library. It needs numpy, and torch for the operators; nothing of
PerfDojo.

    import dojo                           # the library's directory on sys.path
    y = dojo.softmax(x)                   # numpy arrays in, a new numpy array out
    y = torch.ops.dojo.softmax(t)         # a PyTorch custom operator (also `dojo.ops.softmax`)
    help(dojo.softmax)                    # its arrays: names, dtypes, shapes

Each kernel takes its input arrays in the order of its kernel line and returns its output (a tuple
when it has several), newly allocated. Arguments must have exactly the dtype and shape the kernel
was tuned for and be C-contiguous (and, for torch, on the CPU); anything else raises TypeError
(not an array, another dtype) or ValueError (another shape, not contiguous, another device) naming
the kernel and the argument. The compiled code reads whole vectors at 64-byte boundaries, so an
input that is not 64-byte aligned is copied first (numpy's arrays often are not; torch's are);
outputs are allocated aligned.

The operators are registered with `torch.library.custom_op`, with a fake implementation that gives
the outputs' shapes and dtypes, so `torch.compile(..., fullgraph=True)` traces through them. They
are inference operators: they have no gradient. ctypes releases the GIL while a C function runs,
and each calling thread has its own workspace, so Python threads may call kernels at once.
"""

from __future__ import annotations

import ctypes
import json
import math
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

ALIGNMENT = 64
NUMPY_DTYPES = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64}
TORCH_DTYPES = {"f32": "float32", "f64": "float64", "i32": "int32", "i64": "int64"}
_SCHEMA_WORDS = frozenset({"self", "out"})  # argument names that mean something in a torch schema
OK, ENOMEM, EALIGN = 0, 1, 2


@dataclass(frozen=True)
class Array:
    name: str
    dtype: str
    shape: tuple[int, ...]

    def __str__(self) -> str:
        return f"{self.name}: {self.dtype} {list(self.shape)}"

    @cached_property
    def numpy_dtype(self) -> np.dtype:
        return np.dtype(NUMPY_DTYPES[self.dtype])

    @cached_property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.numpy_dtype.itemsize

    def aligned_empty(self) -> np.ndarray:
        """A new array of this dtype and shape, 64-byte aligned."""
        return aligned_empty(self.numpy_dtype, self.shape)


def aligned_empty(dtype: np.dtype, shape: Sequence[int]) -> np.ndarray:
    """A new array of `dtype` and `shape` whose data starts at a 64-byte boundary."""
    nbytes = math.prod(shape) * dtype.itemsize
    raw = np.empty(nbytes + ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def read_manifest(directory: Path) -> dict[str, Any]:
    """The library's manifest.json; ValueError when it is not one (ill-formed, nested past reason,
    or missing a field or of the wrong type)."""
    try:
        manifest = json.loads((directory / "manifest.json").read_text(encoding="utf-8"))
    except RecursionError:
        raise ValueError("manifest.json: nested too deeply") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"manifest.json: not UTF-8 text: {error}") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"manifest.json: not JSON: {error}") from None
    arrays = {"name": str, "dtype": str, "shape": list}
    fields = {"library": str, "shared_library": str, "kernels": list}
    kernel_fields = {"name": str, "symbol": str, "description": str, "inputs": list, "outputs": list}
    if not isinstance(manifest, dict) or not _typed(manifest, fields) or not all(
            isinstance(k, dict) and _typed(k, kernel_fields) and all(
                isinstance(a, dict) and _typed(a, arrays) and a["dtype"] in NUMPY_DTYPES
                and all(type(n) is int and n > 0 for n in a["shape"]) for a in (*k["inputs"], *k["outputs"]))
            for k in manifest["kernels"]):
        raise ValueError("manifest.json: not a library's manifest (`dojo library build` writes one)")
    return manifest


def _typed(record: Mapping[str, Any], fields: Mapping[str, type]) -> bool:
    return all(isinstance(record.get(name), kind) for name, kind in fields.items())


def _shared_library(directory: Path, name: str) -> Path:
    """The shared library `name` of the manifest: a plain file in `directory` itself."""
    path = directory / name
    if name in ("", ".", "..") or Path(name).name != name or name.startswith(".") or path.is_symlink() \
            or not path.is_file():
        raise ValueError(f"manifest.json: the shared library `{name}` must be a file of the library's own "
                         "directory (a plain name, not a link)")
    return path


def defined_functions(path: Path) -> frozenset[str]:
    """The functions that the ELF shared object at `path` defines and exports itself: its dynamic
    symbol table's defined, global, default-visibility functions, not those of the libraries it
    depends on (which the loader would also find by name)."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4:6] != b"\x02\x01":
        raise ValueError(f"{path.name}: not a 64-bit little-endian ELF shared library")
    try:
        offset, = struct.unpack_from("<Q", data, 0x28)
        entry_size, count = struct.unpack_from("<HH", data, 0x3A)
        sections = [struct.unpack_from("<IIQQQQIIQQ", data, offset + i * entry_size) for i in range(count)]
        functions = set()
        for _, kind, _, _, start, size, link, _, _, symbol_size in sections:
            if kind != 11 or not symbol_size:  # SHT_DYNSYM
                continue
            names = sections[link][4]
            for at in range(start, start + size, symbol_size):
                name, info, other, section = struct.unpack_from("<IBBH", data, at)
                # defined (section != SHN_UNDEF), STT_FUNC, STB_GLOBAL or STB_WEAK, STV_DEFAULT
                if section and info & 0xF == 2 and info >> 4 in (1, 2) and other & 3 == 0:
                    end = data.index(b"\0", names + name)
                    functions.add(data[names + name:end].decode("ascii", "replace"))
        return frozenset(functions)
    except (struct.error, IndexError, ValueError):
        raise ValueError(f"{path.name}: a malformed ELF shared library") from None


@dataclass(frozen=True)
class Kernel:
    """One function of the library, as the manifest describes it."""

    name: str
    symbol: str
    description: str
    inputs: tuple[Array, ...]
    outputs: tuple[Array, ...]

    def doc(self) -> str:
        ins = ", ".join(map(str, self.inputs))
        outs = ", ".join(map(str, self.outputs))
        return (f"{self.description}\n\n{self.name}({ins}) -> {outs}\n\n"
                "C-contiguous arrays of exactly these dtypes and shapes.")

    def check(self, position: int, array: Array, dtype: str | None, shape: tuple[int, ...], contiguous: bool,
              expected_dtype: str) -> None:
        """Raise for an argument whose dtype (None: not an array at all), shape or layout is wrong."""
        where = f"{self.name}: argument {position + 1}, `{array.name}`,"
        if dtype is None:
            raise TypeError(f"{where} must be an array of {expected_dtype} with shape {array.shape}")
        if dtype != expected_dtype:
            raise TypeError(f"{where} must have dtype {expected_dtype}, not {dtype}")
        if shape != array.shape:
            raise ValueError(f"{where} must have shape {array.shape}, not {shape}")
        if not contiguous:
            raise ValueError(f"{where} must be C-contiguous (row-major, no gaps): copy it first "
                             "(np.ascontiguousarray, Tensor.contiguous)")

    def count(self, args: Sequence[Any]) -> None:
        if len(args) != len(self.inputs):
            names = ", ".join(a.name for a in self.inputs)
            raise TypeError(f"{self.name}() takes {len(self.inputs)} arrays ({names}), {len(args)} given")


class Library:
    """The kernels of the library in `directory` (its manifest.json and shared library). Loading a
    library runs its code: before it is loaded, the shared library must be a plain file of the
    directory, and every kernel's function one the shared library itself defines, under the name
    `LIBRARY_KERNEL` that `dojo library build` gives it, so that a manifest cannot point at code
    elsewhere. `manifest` (as read from manifest.json) lets a caller that has checked it pass it."""

    def __init__(self, directory: Path, manifest: Mapping[str, Any] | None = None):
        manifest = read_manifest(directory) if manifest is None else manifest
        self.name: str = manifest["library"]
        self.kernels: dict[str, Kernel] = {
            k["name"]: Kernel(k["name"], k["symbol"], k["description"],
                              tuple(Array(a["name"], a["dtype"], tuple(a["shape"])) for a in k["inputs"]),
                              tuple(Array(a["name"], a["dtype"], tuple(a["shape"])) for a in k["outputs"]))
            for k in manifest["kernels"]}
        shared = _shared_library(directory, manifest["shared_library"])
        defined = defined_functions(shared)
        for kernel in self.kernels.values():
            if kernel.symbol != f"{self.name}_{kernel.name}" or kernel.symbol not in defined:
                raise ValueError(f"kernel `{kernel.name}`: its function `{kernel.symbol}` is not "
                                 f"`{self.name}_{kernel.name}` as {shared.name} itself defines it")
        # nothing to call, nothing to load: a library's code runs only for the kernels used from it
        self._dll = ctypes.CDLL(str(shared)) if self.kernels else None
        self._functions: dict[str, Any] = {}
        for kernel in self.kernels.values():
            function = getattr(self._dll, kernel.symbol)
            function.argtypes = [ctypes.c_void_p] * (len(kernel.inputs) + len(kernel.outputs))
            function.restype = ctypes.c_int
            self._functions[kernel.name] = function

    def call(self, kernel: Kernel, pointers: Sequence[int]) -> None:
        """Run `kernel` on the arrays at `pointers` (inputs, then outputs), which must be right."""
        code = self._functions[kernel.name](*pointers)
        if code == ENOMEM:
            raise MemoryError(f"{kernel.name}: cannot allocate the kernel's workspace")
        if code != OK:
            raise RuntimeError(f"{kernel.name}: the library function returned {code}")

    # -- numpy ------------------------------------------------------------------------------------

    def numpy_function(self, kernel: Kernel) -> Callable[..., Any]:
        def run(*args: np.ndarray) -> Any:
            kernel.count(args)
            pointers, copies = [], []
            for position, (array, value) in enumerate(zip(kernel.inputs, args, strict=True)):
                if not isinstance(value, np.ndarray):
                    kernel.check(position, array, None, (), False, array.numpy_dtype.name)
                if value.dtype != array.numpy_dtype or value.shape != array.shape or not value.flags.c_contiguous:
                    kernel.check(position, array, value.dtype.name, value.shape, value.flags.c_contiguous,
                                 array.numpy_dtype.name)
                pointer = value.ctypes.data
                if pointer % ALIGNMENT:
                    aligned = array.aligned_empty()
                    aligned[...] = value
                    pointer = aligned.ctypes.data
                    copies.append(aligned)  # alive until the call returns
                pointers.append(pointer)
            outputs = [array.aligned_empty() for array in kernel.outputs]
            self.call(kernel, pointers + [a.ctypes.data for a in outputs])
            return outputs[0] if len(outputs) == 1 else tuple(outputs)

        run.__name__ = run.__qualname__ = kernel.name
        run.__doc__ = kernel.doc()
        return run

    def numpy_functions(self) -> dict[str, Callable[..., Any]]:
        return {name: self.numpy_function(kernel) for name, kernel in self.kernels.items()}

    # -- torch ------------------------------------------------------------------------------------

    def torch_ops(self) -> Any:
        """Register every kernel as the operator `torch.ops.LIBRARY.KERNEL` (once per process) and
        return `torch.ops.LIBRARY`; None when torch is not installed."""
        try:
            import torch
        except ImportError:
            return None
        namespace = getattr(torch.ops, self.name)
        for kernel in self.kernels.values():
            if hasattr(namespace, kernel.name):  # this library was loaded before in this process
                continue
            names = [f"{a.name}_" if a.name in _SCHEMA_WORDS else a.name for a in kernel.inputs]
            results = ", ".join("Tensor" for _ in kernel.outputs)
            schema = f"({', '.join(f'Tensor {n}' for n in names)}) -> " + (
                results if len(kernel.outputs) == 1 else f"({results})")
            op = torch.library.custom_op(f"{self.name}::{kernel.name}", self._torch_run(torch, kernel),
                                         mutates_args=(), schema=schema)
            op.register_fake(self._torch_fake(torch, kernel))
        return namespace

    def _torch_check(self, torch: Any, kernel: Kernel, tensors: Sequence[Any]) -> None:
        kernel.count(tensors)
        for position, (array, tensor) in enumerate(zip(kernel.inputs, tensors, strict=True)):
            expected = TORCH_DTYPES[array.dtype]
            if not isinstance(tensor, torch.Tensor):
                kernel.check(position, array, None, (), False, expected)
            if (tensor.dtype is getattr(torch, expected) and tensor.shape == array.shape and tensor.is_contiguous()
                    and tensor.device.type == "cpu"):
                continue
            kernel.check(position, array, str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape),
                         tensor.is_contiguous(), expected)
            raise ValueError(f"{kernel.name}: argument {position + 1}, `{array.name}`, must be on the CPU, "
                             f"not {tensor.device}")

    def _torch_outputs(self, torch: Any, kernel: Kernel) -> list[Any]:
        return [torch.empty(a.shape, dtype=getattr(torch, TORCH_DTYPES[a.dtype])) for a in kernel.outputs]

    def _torch_run(self, torch: Any, kernel: Kernel) -> Callable[..., Any]:
        def run(*tensors: Any) -> Any:
            self._torch_check(torch, kernel, tensors)
            # torch's CPU allocator aligns to 64 bytes, so a copy is aligned where a view may not be
            given = [t if t.data_ptr() % ALIGNMENT == 0 else t.clone() for t in tensors]
            outputs = self._torch_outputs(torch, kernel)
            self.call(kernel, [t.data_ptr() for t in given + outputs])
            return outputs[0] if len(outputs) == 1 else tuple(outputs)

        return run

    def _torch_fake(self, torch: Any, kernel: Kernel) -> Callable[..., Any]:
        def fake(*tensors: Any) -> Any:
            self._torch_check(torch, kernel, tensors)
            outputs = self._torch_outputs(torch, kernel)
            return outputs[0] if len(outputs) == 1 else tuple(outputs)

        return fake
