"""The CUDA and HIP backends: one generator, two dialects of the runtime API.

    static void kernel(const float *__restrict__ b_x, float *__restrict__ b_y)

is the host function that the C backend's harness calls (same protocol, same
parameters). It runs every node that is not under a `:g` scope as sequential
C++ (`stack` and `shared` buffers used there are its local arrays), and
launches each outermost `:g` scope as a kernel where it reaches it
(gpukernel.py says how a kernel maps onto blocks and threads), passing the
variables of the host loops around it. After a launch it waits for the GPU,
unless the next node is another launch (kernels on one stream run in order), so
the host never reads what a running kernel writes, and `kernel` returns only
when the GPU is done: the harness's clock times whole runs.

Every buffer that the harness allocates (inputs, outputs, heap temporaries) is
unified memory, which the host code and the kernels both reach. Before a timed
run the harness moves the buffers to the GPU, untimed (`dojo_prefetch`), so a
run does not pay to move inputs that the host has just refilled.

The dialects differ only in the runtime prelude (header, API names, how to
prefetch) and in the warp the block is padded to (an AMD wavefront is 64);
kernels and host code are the same text.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from dojo_ir.analysis import Analysis
from dojo_ir.paths import node_at
from dojo_ir.tree import Node, Program, Scope

from .c import parameters
from .cexpr import Env, buffer_var, helper_source, loop_var, used_helpers
from .gpukernel import Homes, Kernel, KernelWriter, Path, Sequential, homes, indented, is_grid, plan, pointers
from .harness import harness
from .targets import Target

_INCLUDES = ("math.h", "stdint.h", "stdio.h", "stdlib.h", "time.h")


@dataclass(frozen=True)
class Dialect:
    api: str  # the runtime API's prefix
    header: str
    warp: int
    concurrent_managed_access: str  # the device attribute
    prefetch: str  # statements moving `bytes` at `p` to GPU `device`


_CUDA_PREFETCH = """#if CUDART_VERSION >= 13000
    struct cudaMemLocation location = {cudaMemLocationTypeDevice, device};
    dojo_check(cudaMemPrefetchAsync(p, bytes, location, 0, 0), "moving a buffer to", "the GPU");
#else
    dojo_check(cudaMemPrefetchAsync(p, bytes, device, 0), "moving a buffer to", "the GPU");
#endif"""

DIALECTS = {
    "cuda": Dialect("cuda", "cuda_runtime.h", 32, "cudaDevAttrConcurrentManagedAccess", _CUDA_PREFETCH),
    "hip": Dialect("hip", "hip/hip_runtime.h", 64, "hipDeviceAttributeConcurrentManagedAccess",
                   '    dojo_check(hipMemPrefetchAsync(p, bytes, device, 0), "moving a buffer to", "the GPU");'),
}

_RUNTIME = """static void dojo_check({api}Error_t error, const char *what, const char *name)
{{
    if (error != {api}Success) {{
        fprintf(stderr, "%s %s: %s\\n", what, name, {api}GetErrorString(error));
        exit(1);
    }}
}}

static void *dojo_alloc(size_t bytes)
{{
    void *p = NULL;
    dojo_check({api}MallocManaged(&p, bytes), "allocating", "unified memory");
    return p;
}}

/* Where the GPU cannot reach unified memory while the host runs, a launch
   moves it; elsewhere a prefetch does it ahead, and waits. */
static void dojo_prefetch(const void *p, size_t bytes)
{{
    static int device = -1, concurrent = 0;
    if (device < 0) {{
        dojo_check({api}GetDevice(&device), "finding", "the GPU");
        dojo_check({api}DeviceGetAttribute(&concurrent, {attribute}, device), "asking about", "unified memory");
    }}
    if (!concurrent)
        return;
{prefetch}
    dojo_check({api}DeviceSynchronize(), "moving a buffer to", "the GPU");
}}"""

_LAUNCHES = """static void dojo_launched(const char *name)
{{
    dojo_check({api}GetLastError(), "launching", name);
}}

static void dojo_wait(const char *name)
{{
    dojo_check({api}DeviceSynchronize(), "running the kernels up to", name);
}}"""


class _Host(Sequential):
    """The host function's body: sequential code and kernel launches."""

    def __init__(self, program: Program, homes: Homes, kernels: dict[Path, Kernel]):
        super().__init__(program, homes, device=False)
        self.kernels = kernels

    def node(self, node: Node, path: Path, env: Env) -> Iterator[str]:
        if not is_grid(node):
            yield from super().node(node, path, env)
            return
        k = self.kernels[path]
        args = [buffer_var(b.name) for b in k.buffers] + [str(env[d]) for d in range(k.host_depth)]
        yield f"{k.name}<<<{k.blocks}, {k.threads}>>>({', '.join(args)});"
        yield f'dojo_launched("{k.name}");'
        if not self._launch_follows(path):
            yield f'dojo_wait("{k.name}");'

    def _launch_follows(self, path: Path) -> bool:
        parent = self.program.body if len(path) == 1 else node_at(self.program.body, path[:-1]).body
        return path[-1] + 1 < len(parent) and is_grid(parent[path[-1] + 1])


def _roots(nodes: tuple[Node, ...], path: Path = ()) -> Iterator[tuple[Path, Scope]]:
    """Every outermost `:g` scope with its path, in tree order."""
    for i, node in enumerate(nodes):
        if isinstance(node, Scope):
            if node.kind == "g":
                yield path + (i,), node
            else:
                yield from _roots(node.body, path + (i,))


@dataclass(frozen=True)
class _Plan:
    """The program cut into GPU kernels, each with its `__global__` source."""

    program: Program
    homes: Homes
    kernels: dict[Path, Kernel]
    device: dict[Path, str]

    @classmethod
    def of(cls, program: Program, dialect: Dialect) -> _Plan:
        local = homes(program)
        analysis = Analysis(program)
        roots = list(_roots(program.body))
        kernels = {path: plan(program, root, path, f"dojo_kernel_{n}", dialect.warp)
                   for n, (path, root) in enumerate(roots)}
        device = {path: KernelWriter(program, analysis, local, kernels[path], root).source() for path, root in roots}
        return cls(program, local, kernels, device)

    def host(self) -> _Host:
        return _Host(self.program, self.homes, self.kernels)

    def code(self) -> str:
        """The `__global__` functions and the host function `kernel`."""
        body = indented(self.host().block(self.program.body, (), {}))
        host = "\n".join([f"static void kernel({', '.join(pointers(self.program, parameters(self.program)))})", "{",
                          *body, "}"])
        return "\n\n".join([*self.device.values(), host])

    def node_code(self, path: Path) -> str:
        """The code of the node at `path`: the kernel it runs in when it is
        under a `:g` scope, else its host code after the kernels it launches."""
        for root, source in self.device.items():
            if path[: len(root)] == root:
                return source
        env = {depth: loop_var(depth) for depth in range(len(path) - 1)}
        launched = [source for root, source in self.device.items() if root[: len(path)] == path]
        host = "\n".join(self.host().node(node_at(self.program.body, path), path, env))
        return "\n\n".join([*launched, host])


def node_code(program: Program, path: Path, target: Target) -> str:
    return _Plan.of(program, DIALECTS[target.language]).node_code(path)


def kernel_code(program: Program, target: Target) -> str:
    return _Plan.of(program, DIALECTS[target.language]).code()


def generate(program: Program, target: Target) -> str:
    """The complete CUDA or HIP source: the runtime prelude, the helpers, one
    `__global__` function per kernel, the host function and the harness."""
    dialect = DIALECTS[target.language]
    cut = _Plan.of(program, dialect)
    code = cut.code()
    prelude = [f"/* kernel {program.name}, generated by PerfDojo's {target.language.upper()} backend */",
               f"#include <{dialect.header}>", *(f"#include <{h}>" for h in _INCLUDES)]
    runtime = _RUNTIME.format(api=dialect.api, attribute=dialect.concurrent_managed_access, prefetch=dialect.prefetch)
    if cut.kernels:
        runtime += "\n\n" + _LAUNCHES.format(api=dialect.api)
    helpers = helper_source(used_helpers(code), "static __host__ __device__ inline")
    sections = ["\n".join(prelude), runtime, helpers, code, harness(program, parameters(program), device=True)]
    return "\n\n".join(s for s in sections if s) + "\n"
