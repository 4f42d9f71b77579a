"""Library generation: tuned kernels as a library that C, numpy and PyTorch call.

    kernels = resolve(["softmax", "layernorm1"], base="small")
    result = build_library(kernels, Path("lib"), BuildOptions(KernelTuneOptions("sa", 50), name="dojo"))

`build_library` (build.py) tunes each kernel with `agent.tune.tune` (`KernelTuneOptions`, here for
convenience), here or over a Ray cluster
(cluster.py), skipping the kernels whose tuned result is already in the directory, then writes the
shared library (csource.py), its header, a Python module (pymodule.py, the code of runtime.py) and
the manifest (manifest.py). docs/library.md describes the directory and every file in it.

The layer sits between the agent and the server: it imports dojo_ir, codegen, runner and agent;
server/commands/library.py imports it for `dojo library build`.
"""

from __future__ import annotations

from agent.tune import KernelTuneOptions

from .build import BuildEvent, BuildOptions, BuildResult, build_library
from .kernels import KernelSpec, LibraryError, library_kernel, resolve

__all__ = ["BuildEvent", "BuildOptions", "BuildResult", "KernelSpec", "KernelTuneOptions", "LibraryError",
           "build_library", "library_kernel", "resolve"]
