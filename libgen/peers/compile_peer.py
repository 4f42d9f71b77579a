"""torch.compile peer: the PyTorch eager functions compiled by TorchInductor for the CPU (C++/OpenMP, gcc),
static shapes. The compile happens on the first call, which `evaluate` counts as setup."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from . import Prepared
from .torch_peer import KERNELS, prepare

NAME = "torch.compile"


def build(kernel: str, shape: dict[str, int], inputs: dict[str, np.ndarray], mode: str | None = None,
          **_: Any) -> Prepared:
    torch._dynamo.reset()
    compiled = torch.compile(KERNELS[kernel], backend="inductor", dynamic=False, fullgraph=True, mode=mode)
    return prepare(compiled, kernel, inputs)
