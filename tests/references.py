"""NumPy references for the kernel library, written from the operators'
definitions rather than from the `.dojo` text, so that a mistake in one does
not hide in the other. They compute in float64 and return outputs by name."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Arrays = dict[str, np.ndarray]

EPS = 1e-5


def _f64(inputs: Arrays) -> Arrays:
    return {name: np.asarray(value, dtype=np.float64) for name, value in inputs.items()}


def _normalize(x: np.ndarray, axis: tuple[int, ...]) -> np.ndarray:
    # Biased variance (mean of squared deviations), as training-mode norms use
    mean = x.mean(axis=axis, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axis, keepdims=True)
    return (x - mean) / np.sqrt(var + EPS)


def add(a: Arrays) -> Arrays:
    return {"z": a["x"] + a["y"]}


def mul(a: Arrays) -> Arrays:
    return {"z": a["x"] * a["y"]}


def relu(a: Arrays) -> Arrays:
    return {"y": np.maximum(a["x"], 0.0)}


def batchnorm(a: Arrays) -> Arrays:
    return {"y": _normalize(a["x"], axis=(0, 2, 3))}


def bmm(a: Arrays) -> Arrays:
    return {"c": np.einsum("bmk,bkn->bmn", a["a"], a["b"])}


def conv(a: Arrays) -> Arrays:
    x, w = a["x"], a["w"]
    k = w.shape[-1]
    # Every filter tap as a shifted view: windows[n, ci, oh, ow, kh, kw]
    windows = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))
    return {"y": np.einsum("nchwij,ocij->nohw", windows, w)}


def layernorm(a: Arrays) -> Arrays:
    return {"y": _normalize(a["x"], axis=(1,)) * a["g"] + a["b"]}


def matmul(a: Arrays) -> Arrays:
    return {"c": a["a"] @ a["b"]}


def reducemean(a: Arrays) -> Arrays:
    return {"y": a["x"].mean(axis=1)}


def relu_ffn(a: Arrays) -> Arrays:
    hidden = np.maximum(a["x"], 0.0)
    return {"y": np.einsum("oc,nchw->nohw", a["w"], hidden) + a["b"][None, :, None, None]}


def rmsnorm(a: Arrays) -> Arrays:
    x = a["x"]
    rms = np.sqrt((x**2).mean(axis=1, keepdims=True) + EPS)
    return {"y": x / rms * a["g"]}


def softmax(a: Arrays) -> Arrays:
    x = a["x"]
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return {"y": e / e.sum(axis=1, keepdims=True)}


def swiglu(a: Arrays) -> Arrays:
    gate = a["x"] @ a["w"]
    up = a["x"] @ a["v"]
    return {"y": gate / (1.0 + np.exp(-gate)) * up}


def _in_float64(reference: Callable[[Arrays], Arrays]) -> Callable[[Arrays], Arrays]:
    return lambda inputs: reference(_f64(inputs))


REFERENCES: dict[str, Callable[[Arrays], Arrays]] = {
    name: _in_float64(reference)
    for name, reference in {
        "add": add,
        "batchnorm1": batchnorm,
        "batchnorm2": batchnorm,
        "bmm": bmm,
        "conv1": conv,
        "conv2": conv,
        "layernorm1": layernorm,
        "layernorm2": layernorm,
        "matmul": matmul,
        "mul": mul,
        "reducemean": reducemean,
        "relu": relu,
        "relu_ffn": relu_ffn,
        "rmsnorm": rmsnorm,
        "softmax": softmax,
        "swiglu": swiglu,
    }.items()
}
