"""Code generation: a `.dojo` program as C (OpenMP, vector types), CUDA or HIP source.

    source = generate(program, "native")
    binary = build(source, get_target("native"))   # codegen.build
"""

from __future__ import annotations

from importlib import import_module

from dojo_ir.tree import Program

from .c import generate_c
from .targets import TARGETS, Target, get_target


def generate(program: Program, target: Target | str) -> str:
    """The complete source for `target`: the kernel function and the harness
    `main`. A C target gets C; a GPU target the GPU backend's CUDA or HIP."""
    target = get_target(target) if isinstance(target, str) else target
    if target.language == "c":
        return generate_c(program)
    # imported here so that the C backend does not depend on the GPU backend
    return import_module(".gpu", __name__).generate(program, target)


__all__ = ["TARGETS", "Target", "generate", "get_target"]
