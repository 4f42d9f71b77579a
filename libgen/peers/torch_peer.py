"""PyTorch eager peer: each kernel with PyTorch's own operators (F.batch_norm in training mode, F.layer_norm,
F.rms_norm, F.conv2d, ...), CPU, 2 threads, under inference mode."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from . import THREADS, Prepared, copy_into, input_names

NAME = "torch"
EPS = 1e-5


def batchnorm(x):
    return F.batch_norm(x, None, None, training=True, eps=EPS)  # batch statistics, biased variance, no affine


def conv(x, w):
    return F.conv2d(x, w)


def layernorm(x, g, b):
    return F.layer_norm(x, (x.shape[-1],), g, b, EPS)


def relu_ffn(x, w, b):
    return F.conv2d(torch.relu(x), w[:, :, None, None], b)


def rmsnorm(x, g):
    return F.rms_norm(x, (x.shape[-1],), g, EPS)


def swiglu(x, w, v):
    return F.silu(x @ w) * (x @ v)


KERNELS = {
    "add": lambda x, y: x + y, "mul": lambda x, y: x * y, "relu": lambda x: torch.relu(x),
    "batchnorm1": batchnorm, "batchnorm2": batchnorm, "bmm": lambda a, b: torch.bmm(a, b), "conv1": conv,
    "conv2": conv, "layernorm1": layernorm, "layernorm2": layernorm,
    "matmul": lambda a, b: a @ b, "reducemean": lambda x: x.mean(-1), "relu_ffn": relu_ffn, "rmsnorm": rmsnorm,
    "softmax": lambda x: torch.softmax(x, -1), "swiglu": swiglu,
}


def prepare(function, kernel: str, inputs: dict[str, np.ndarray]) -> Prepared:
    torch.set_num_threads(THREADS)
    arrays = {name: np.ascontiguousarray(inputs[name]) for name in input_names(kernel)}
    args = [torch.from_numpy(array) for array in arrays.values()]  # sharing the arrays' memory

    def run():
        with torch.inference_mode():
            return function(*args)

    return Prepared(run=run, fetch=lambda t: t.numpy(), refresh=copy_into(arrays))


def build(kernel: str, shape: dict[str, int], inputs: dict[str, np.ndarray], **_: Any) -> Prepared:
    return prepare(KERNELS[kernel], kernel, inputs)
