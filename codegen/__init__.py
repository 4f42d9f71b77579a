"""Code generation: a `.dojo` program as C (OpenMP, vector types), CUDA or HIP source.

    source = generate(program, "native")
    binary = build(source, get_target("native"))   # codegen.build

`kernel_source` and `node_source` give the part a person reads: the kernel
without its harness, or the code of one node (what the editor's hover shows).
"""

from __future__ import annotations

from importlib import import_module

from dojo_ir.tree import Program

from .c import generate_c, kernel_function, node_code
from .targets import TARGETS, Target, get_target

Path = tuple[int, ...]


def _target(target: Target | str) -> Target:
    return get_target(target) if isinstance(target, str) else target


def _gpu():
    # imported on use so that the C backend does not depend on the GPU backend
    return import_module(".gpu", __name__)


def generate(program: Program, target: Target | str) -> str:
    """The complete source for `target`: the kernel function and the harness
    `main`. A C target gets C; a GPU target the GPU backend's CUDA or HIP."""
    target = _target(target)
    return generate_c(program, target) if target.language == "c" else _gpu().generate(program, target)


def kernel_source(program: Program, target: Target | str) -> str:
    """The kernel's own code, without includes, helpers or harness."""
    target = _target(target)
    return kernel_function(program, target) if target.language == "c" else _gpu().kernel_code(program, target)


def node_source(program: Program, path: Path, target: Target | str) -> str:
    """The code of the node at `path` (child indices from the body down), with
    the loop variables of the scopes around it free."""
    target = _target(target)
    return node_code(program, path, target) if target.language == "c" else _gpu().node_code(program, path, target)


__all__ = ["TARGETS", "Target", "generate", "get_target", "kernel_source", "node_source"]
