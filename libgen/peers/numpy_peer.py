"""numpy peer: each kernel as numpy array operations, in the inputs' dtype (float64 for the reference)."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import Prepared, copy_into

NAME = "numpy"
EPS = 1e-5


def add(x, y):
    return x + y


def mul(x, y):
    return x * y


def relu(x):
    return np.maximum(x, 0)


def batchnorm(x):
    mean = x.mean(axis=(0, 2, 3), keepdims=True)
    d = x - mean
    var = np.mean(d * d, axis=(0, 2, 3), keepdims=True)
    return d / np.sqrt(var + x.dtype.type(EPS))


def bmm(a, b):
    return np.matmul(a, b)


def conv(x, w):
    """Valid cross-correlation, stride 1: one (co x ci) by (ci x pixels) product per filter tap."""
    n, ci, h, wd = x.shape
    co, _, k, _ = w.shape
    oh, ow = h - k + 1, wd - k + 1
    y = np.zeros((n, co, oh * ow), dtype=x.dtype)
    for p in range(k):
        for q in range(k):
            window = np.ascontiguousarray(x[:, :, p:p + oh, q:q + ow]).reshape(n, ci, oh * ow)
            y += np.matmul(w[:, :, p, q], window)
    return y.reshape(n, co, oh, ow)


def layernorm(x, g, b):
    mean = x.mean(axis=-1, keepdims=True)
    d = x - mean
    var = np.mean(d * d, axis=-1, keepdims=True)
    return d / np.sqrt(var + x.dtype.type(EPS)) * g + b


def matmul(a, b):
    return a @ b


def reducemean(x):
    return x.mean(axis=-1)


def relu_ffn(x, w, b):
    n, c, h, wd = x.shape
    r = np.maximum(x, 0).reshape(n, c, h * wd)
    return (np.matmul(w, r) + b[:, None]).reshape(n, c, h, wd)


def rmsnorm(x, g):
    ms = np.mean(x * x, axis=-1, keepdims=True)
    return x / np.sqrt(ms + x.dtype.type(EPS)) * g


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def swiglu(x, w, v):
    a = x @ w
    with np.errstate(over="ignore"):  # exp(-a) overflows to inf for a very negative a: a / inf = -0, as in C
        return a / (1 + np.exp(-a)) * (x @ v)


KERNELS = {
    "add": add, "mul": mul, "relu": relu, "batchnorm1": batchnorm, "batchnorm2": batchnorm, "bmm": bmm,
    "conv1": conv, "conv2": conv, "layernorm1": layernorm, "layernorm2": layernorm, "matmul": matmul,
    "reducemean": reducemean, "relu_ffn": relu_ffn, "rmsnorm": rmsnorm, "softmax": softmax, "swiglu": swiglu,
}


def build(kernel: str, shape: dict[str, int], inputs: dict[str, np.ndarray], **_: Any) -> Prepared:
    function, args = KERNELS[kernel], dict(inputs)
    return Prepared(run=lambda: function(**args), fetch=np.asarray, refresh=copy_into(args))
