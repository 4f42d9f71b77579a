"""Numerical verification: do a kernel's outputs match its spec's on the same inputs?

Moves keep the meaning exactly, but a compiler may evaluate a reassociated reduction (a split, a
vector accumulator) in another order, so floats agree to rounding only:

    f32: |actual - expected| <= 1e-5 + 1e-4 * |expected|
    f64: |actual - expected| <= 1e-12 + 1e-9 * |expected|
    i32, i64: exactly

A NaN must meet a NaN, and an infinity the same infinity. The runner also reads the arrays a harness
writes, which is the other half of this module: the binary format of `codegen`'s harness.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from dojo_ir import Program

NUMPY_DTYPES = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64}
TOLERANCES = {"f32": (1e-4, 1e-5), "f64": (1e-9, 1e-12), "i32": (0.0, 0.0), "i64": (0.0, 0.0)}


def interface(program: Program, names: tuple[str, ...]) -> tuple[tuple[str, str, tuple[int, ...]], ...]:
    """Name, dtype and logical shape of the arrays `names`: what a harness reads or writes."""
    return tuple((n, program.buffer_of[n].dtype, program.buffer_of[n].shape) for n in names)


def encode(program: Program, inputs: Mapping[str, np.ndarray]) -> bytes:
    """The harness's input file: the kernel's inputs in kernel-line order, each as a raw native-endian
    C-order array of its dtype at its full logical shape."""
    parts = []
    for name, dtype, shape in interface(program, program.inputs):
        array = np.asarray(inputs[name], dtype=NUMPY_DTYPES[dtype], order="C")  # ascontiguousarray makes a scalar 1-d
        if array.shape != shape:
            raise ValueError(f"input `{name}` has shape {array.shape}, the kernel declares {shape}")
        parts.append(array.tobytes())
    return b"".join(parts)


def decode(program: Program, data: bytes) -> dict[str, np.ndarray]:
    """The harness's output file, by output name. Raises ValueError if its size is not exactly that of
    the outputs, which is how a harness that died half-way through writing shows."""
    arrays, offset = {}, 0
    for name, dtype, shape in interface(program, program.outputs):
        count = int(np.prod(shape, dtype=np.int64))
        size = count * np.dtype(NUMPY_DTYPES[dtype]).itemsize
        if offset + size > len(data):
            raise ValueError(f"the output file ends inside `{name}` ({len(data)} bytes)")
        arrays[name] = np.frombuffer(data, NUMPY_DTYPES[dtype], count, offset).reshape(shape)
        offset += size
    if offset != len(data):
        raise ValueError(f"the output file has {len(data) - offset} bytes more than the outputs")
    return arrays


def compare(program: Program, actual: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray],
            *also: Mapping[str, np.ndarray]) -> tuple[bool, float]:
    """Whether every output is within its dtype's tolerance of the spec's, and the largest absolute
    difference over all of them (infinite when a NaN or an infinity is not matched). With `also`,
    other references of the same spec, an element passes within tolerance of the interval the
    references span: a long f32 reduction computed in order and in wider precision differ, and a
    program between them (or near either) computes what the spec means. The tolerance then also
    grows by the widest such interval in the output: a reassociated reduction (a sum in blocks)
    rounds as far from the exact result as the ordered one does, but not always to the same side,
    and where a sum cancels to near zero its rounding is far above the relative tolerance."""
    verified, worst = True, 0.0
    for name, dtype, _ in interface(program, program.outputs):
        a = np.asarray(actual[name]).reshape(-1)
        references = [np.asarray(r[name]).reshape(-1) for r in (expected, *also)]
        if dtype in ("i32", "i64"):
            diff = np.min([np.abs(a.astype(np.float64) - e.astype(np.float64)) for e in references], axis=0)
            verified &= bool(np.any([np.array_equal(a, e) for e in references]))
            worst = max(worst, float(diff.max())) if diff.size else worst
        else:
            ok, largest = _compare_floats(a, references, *TOLERANCES[dtype])
            verified &= ok
            worst = max(worst, largest)
    return verified, worst


# Floats are compared a chunk at a time: a batch norm's outputs are 100M elements, and whole-array
# float64 temporaries made the comparison take longer than the timed runs.
_CHUNK = 1 << 16


def _chunks(n: int) -> range:
    return range(0, n, _CHUNK)


def _interval(references: list[np.ndarray], start: int) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    wide = [e[start:start + _CHUNK].astype(np.float64) for e in references]
    return np.fmin.reduce(wide), np.fmax.reduce(wide), wide


def _compare_floats(a: np.ndarray, references: list[np.ndarray], rtol: float, atol: float) -> tuple[bool, float]:
    rounding = 0.0
    if len(references) > 1:
        for start in _chunks(a.size):
            low, high, _ = _interval(references, start)
            spread = np.nan_to_num(high - low, nan=0.0, posinf=0.0)
            rounding = max(rounding, float(spread.max()))
    verified, worst = True, 0.0
    for start in _chunks(a.size):
        low, high, wide = _interval(references, start)
        a64 = a[start:start + _CHUNK].astype(np.float64)
        same = np.any([(a64 == e) | (np.isnan(a64) & np.isnan(e)) for e in wide], axis=0)  # matching inf too
        with np.errstate(invalid="ignore"):
            outside = np.maximum(np.maximum(low - a64, a64 - high), 0.0)
            diff = np.where(same, 0.0, outside)
        diff = np.where(np.isnan(diff), np.inf, diff)
        scale = np.maximum(np.abs(low), np.abs(high))
        verified &= bool(np.all(same | (diff <= atol + rtol * scale + rounding)))
        worst = max(worst, float(diff.max()))
    return verified, worst
