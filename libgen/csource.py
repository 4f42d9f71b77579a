"""The C side of a library: one translation unit per kernel, the header, the shared library.

Each unit is the C backend's source for the tuned program without the harness
(`codegen.c.generate_c(..., with_main=False)`: helpers and `static void kernel(...)`, which takes
the inputs' buffers, the outputs' and then the heap temporaries'), followed by the one function the
library exports for it:

    int dojo_softmax(const float *x, float *y);

It takes one pointer per array of the kernel line, inputs then outputs, returns DOJO_OK (0), or
DOJO_EALIGN when a pointer is not 64-byte aligned (the generated code loads and stores whole
aligned vectors), or DOJO_ENOMEM when the workspace cannot be allocated. The workspace (the heap
temporaries, `manifest.workspace`) belongs to the calling thread: allocated on its first call and
freed when it exits (a pthread key), so threads may call the function at once. Units are compiled
apart (their helpers are `static`, and each defines `kernel`), in parallel and only when they
changed, and linked into one shared library that exports only the entry points
(`-fvisibility=hidden`).
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from codegen.build import cache_key
from codegen.c import generate_c, parameters
from codegen.cexpr import buffer_var, c_type
from codegen.targets import Target
from dojo_ir import Program
from runner.result import format_time

from .kernels import C_KEYWORDS, LibraryError
from .manifest import ALIGNMENT, workspace

OK, ENOMEM, EALIGN = 0, 1, 2
_TIMEOUT_S = 1800
_STDERR_LINES = 30


def entry_point(program: Program, symbol: str, prefix: str) -> str:
    """The exported function `symbol` of the module's docstring, calling `kernel`."""
    inputs = {program.buffer_of[n].name for n in program.inputs}
    io = [program.buffer_of[n] for n in program.inputs + program.outputs]
    if len({b.name for b in io}) != len(io):
        raise LibraryError(f"{program.name}: two arrays of the kernel line share one buffer; a library function "
                           "takes one pointer per array")
    params = ", ".join(f"{'const ' if b.name in inputs else ''}{c_type(b.dtype)} *{buffer_var(b.name)}" for b in io)
    pointers = " | ".join(f"(uintptr_t){buffer_var(b.name)}" for b in io)
    placed, size = workspace(program)
    offsets = dict(placed)
    args = ", ".join(buffer_var(b.name) if b in io
                     else f"({c_type(b.dtype)} *)(entry_workspace + {offsets[b.name]})" for b in parameters(program))
    lines = [f"__attribute__((visibility(\"default\"))) int {symbol}({params})", "{",
             f"    if (({pointers}) % {ALIGNMENT} != 0)", f"        return {prefix}_EALIGN;"]
    if size:
        lines += ["    char *entry_workspace = entry_thread_workspace();", "    if (!entry_workspace)",
                  f"        return {prefix}_ENOMEM;"]
    lines += [f"    kernel({args});", f"    return {prefix}_OK;", "}"]
    return "\n".join([*_workspace_source(size), *_codes(prefix), "\n".join(lines)])


def _codes(prefix: str) -> list[str]:
    return [f"#define {prefix}_OK {OK}\n#define {prefix}_ENOMEM {ENOMEM}\n#define {prefix}_EALIGN {EALIGN}\n"]


def _workspace_source(size: int) -> list[str]:
    """`entry_thread_workspace()`: this thread's `size` bytes, allocated on first use and freed
    (pthread key destructor) when the thread exits; NULL when they cannot be had."""
    if not size:
        return []
    return [f"""#include <pthread.h>

static pthread_key_t entry_key;
static pthread_once_t entry_once = PTHREAD_ONCE_INIT;
static int entry_key_error;

static void entry_make_key(void)
{{
    entry_key_error = pthread_key_create(&entry_key, free);
}}

static char *entry_thread_workspace(void)
{{
    pthread_once(&entry_once, entry_make_key);
    if (entry_key_error)
        return NULL;
    char *workspace = pthread_getspecific(entry_key);
    if (!workspace) {{
        workspace = aligned_alloc({ALIGNMENT}, {size});
        if (workspace && pthread_setspecific(entry_key, workspace) != 0) {{
            free(workspace);
            workspace = NULL;
        }}
    }}
    return workspace;
}}
"""]


def unit(program: Program, symbol: str, prefix: str, target: Target) -> str:
    """The translation unit of one kernel: the generated code and its entry point."""
    return generate_c(program, target, with_main=False) + "\n" + entry_point(program, symbol, prefix) + "\n"


def _c_name(name: str) -> str:
    # array names are .dojo names, which may be C keywords
    return f"{name}_" if name in C_KEYWORDS else name


def comment_text(text: str) -> str:
    """`text` made safe inside a C block comment: one line that cannot close the comment (`*/`), nor
    splice lines (a control character, or `??/`, a trigraph's backslash under -std=c11). A model's node
    names and a spec's comments are anyone's text."""
    return re.sub(r"[\x00-\x1f\x7f]", " ", text).replace("*/", "* /").replace("?", "? ")


def header(library: str, prefix: str, kernels: Sequence[Mapping[str, Any]]) -> str:
    """`library.h`: the return codes and one documented prototype per manifest entry."""
    guard = f"{prefix}_H"
    lines = [f"/* {library}: kernels tuned by PerfDojo (`dojo library build`); link with -l{library}.",
             " *",
             " * Every function takes one pointer per array, inputs then outputs, each C-order (row-major),",
             f" * contiguous and {ALIGNMENT}-byte aligned (aligned_alloc({ALIGNMENT}, ...)); outputs must not",
             " * overlap inputs or each other. It returns " + f"{prefix}_OK, {prefix}_EALIGN for a misaligned pointer",
             f" * or {prefix}_ENOMEM when its workspace cannot be allocated. Threads may call the functions at",
             " * once: each calling thread has its own workspace, allocated on its first call and freed when",
             " * it exits. manifest.json beside the library records how each kernel was tuned. */",
             f"#ifndef {guard}", f"#define {guard}", "", "#ifdef __cplusplus", 'extern "C" {', "#endif", "",
             *_codes(prefix)]
    for kernel in kernels:
        io = [*kernel["inputs"], *kernel["outputs"]]
        inputs = {a["name"] for a in kernel["inputs"]}
        doc = [f"/* {kernel['name']}: {comment_text(kernel['description'])}"]
        for array in io:
            role = "input" if array["name"] in inputs else "output"
            doc.append(f" *   {_c_name(array['name'])}: {role}, {array['dtype']} {array['shape']}")
        doc.append(f" * Tuned for {kernel['target']} by {kernel['method']} (budget {kernel['budget']}, "
                   f"{len(kernel['moves'])} moves): {format_time(kernel['spec_s'])} -> "
                   f"{format_time(kernel['time_s'])}. */")
        params = ", ".join(f"{'const ' if a['name'] in inputs else ''}{c_type(a['dtype'])} *{_c_name(a['name'])}"
                           for a in io)
        lines += [*doc, f"int {kernel['symbol']}({params});", ""]
    lines += ["#ifdef __cplusplus", "}", "#endif", "", f"#endif /* {guard} */", ""]
    return "\n".join(lines)


def _run(command: list[str], what: str, target: Target) -> None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise LibraryError(f"cannot run {target.compiler[-1]}: {error}") from None
    if done.returncode != 0:
        stderr = "\n".join(done.stderr.splitlines()[:_STDERR_LINES])
        raise LibraryError(f"{target.compiler[-1]} failed to build {what} (exit {done.returncode}):\n{stderr}")


def _object(source: Path, target: Target, flags: list[str]) -> Path:
    """`source` compiled, as `NAME.KEY.o` beside it (KEY: the source's and compiler's hash, so an
    unchanged unit is not compiled again); the unit's older objects are removed."""
    key = cache_key(source.read_text(encoding="utf-8"), target)[:16]
    built = source.with_name(f"{source.stem}.{key}.o")
    if not built.exists():
        temporary = source.with_name(f".{built.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            _run([*target.compiler, "-c", "-fPIC", "-fvisibility=hidden", "-pthread", str(source), "-o",
                  str(temporary), *flags], source.name, target)
            os.replace(temporary, built)
        finally:
            temporary.unlink(missing_ok=True)
    for old in source.parent.glob(f"{source.stem}.*.o"):
        if old != built:
            old.unlink(missing_ok=True)
    return built


def compile_library(sources: Sequence[Path], target: Target, out: Path) -> None:
    """Compile the units `sources` (in parallel, each only when it changed) and link them into the
    shared library `out`, replacing it at once when done."""
    if target.language != "c":
        raise LibraryError(f"a library is C: target {target.name} generates {target.language}")
    flags = [f for f in target.flags if f != "-static"]  # a shared library links the system's libraries
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        objects = list(pool.map(lambda source: _object(source, target, flags), sources))
    temporary = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        _run([*target.compiler, "-shared", "-pthread", *map(str, objects), "-o", str(temporary), *flags], out.name,
             target)
        os.replace(temporary, out)
    finally:
        temporary.unlink(missing_ok=True)
