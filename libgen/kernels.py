"""What goes into a library: each kernel's name, its spec and where it came from.

    kernels = resolve(["softmax", "tuned/matmul.dojo"], shapes=["softmax.m=64", "n=128"])

A name from the kernel library (`dojo_ir.library.KERNELS`) is that kernel at the paper's shape,
at its quick or small shape (`base`), with some sizes replaced: `PARAM=SIZE` applies to every named
library kernel that has the parameter, `KERNEL.PARAM=SIZE` to one. A `.dojo` file is its program;
a derived file (one with a derivation) is tuned from its spec with its moves kept, as `dojo tune`
does. A directory is its `.dojo` files in name order (a model's import, `dojo import --out DIR`),
without the specs that its derived files name (a library's `kernels/`). The library function is
named after the library kernel or the file's stem, so it must be an identifier that C and Python
accept and not a name the Python module uses itself.
"""

from __future__ import annotations

import keyword
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from dojo_ir import DojoError, Program, load
from dojo_ir.derivation import spec_path
from dojo_ir.library import KERNELS
from dojo_ir.source import read_source

from . import runtime

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# what the generated Python module defines besides the kernels (runtime.py and pymodule.py's tail)
RESERVED = frozenset({"library", "ops"} | {name for name in vars(runtime) if not name.startswith("_")})
# a kernel's name becomes file names with suffixes (`.spec.dojo`, `src/NAME.c`, `NAME.KEY.o` and its
# temporary), and a library's name `libNAME.so`: both stay well inside a file name's 255 bytes
MAX_NAME = 100
C_KEYWORDS = frozenset(
    "auto break case char const continue default do double else enum extern float for goto if inline int long "
    "register restrict return short signed sizeof static struct switch typedef union unsigned void volatile "
    "while bool true false".split())
# NAME.h beside a program's sources, -lNAME and NAME.py on sys.path would stand for these
_SYSTEM_HEADERS = frozenset(
    "assert complex ctype errno fenv float inttypes iso646 limits locale math setjmp signal stdalign stdarg "
    "stdatomic stdbool stddef stdint stdio stdlib stdnoreturn string strings tgmath threads time uchar wchar "
    "wctype pthread unistd fcntl dlfcn sched omp malloc alloca memory immintrin x86intrin arm_neon "
    "riscv_vector cuda hip".split())
_SYSTEM_LIBRARIES = frozenset("c m dl rt pthread gcc gcc_s gomp stdc util crypt resolv atomic quadmath".split())
_PYTHON_MODULES = frozenset(sys.stdlib_module_names) | {
    "numpy", "torch", "onnx", "onnxruntime", "dojo_ir", "codegen", "runner", "agent", "libgen", "server"}


class LibraryError(Exception):
    """A problem with the kernels named, the options or the directory; the message is for people
    (a file's problems come as `FILE:LINE:COL: error: ...`)."""


@dataclass(frozen=True)
class KernelSpec:
    """One kernel of a library. `text` is the spec's text; `prefix` the moves a derived file had
    already played from it; `library` and `shape` the library kernel and its sizes, when it is one
    (the peers know those); `origin` says where it came from, for messages."""

    name: str
    text: str
    origin: str
    prefix: tuple[str, ...] = ()
    library: str | None = None
    shape: tuple[tuple[str, int], ...] = ()

    @cached_property
    def program(self) -> Program:
        return load(self.text)


def _shape_overrides(pairs: Sequence[str], names: Sequence[str]) -> dict[str, dict[str, int]]:
    """`PARAM=SIZE` and `KERNEL.PARAM=SIZE` as the sizes each named library kernel gets."""
    library = [name for name in names if name in KERNELS]
    overrides: dict[str, dict[str, int]] = {name: {} for name in library}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not value.strip().isdigit():
            raise LibraryError(f"--shape takes PARAM=SIZE or KERNEL.PARAM=SIZE, not `{pair}`")
        kernel, dot, param = key.strip().rpartition(".")
        targets = [kernel] if dot else [name for name in library if param in KERNELS[name].params]
        if dot and kernel not in overrides:
            raise LibraryError(f"--shape {pair}: `{kernel}` is not a library kernel named here")
        if not targets or any(param not in KERNELS[name].params for name in targets):
            where = f"`{kernel}` has" if dot else "no library kernel named here has"
            raise LibraryError(f"--shape {pair}: {where} {'no' if dot else 'a'} shape parameter `{param}`")
        for name in targets:
            overrides[name][param] = int(value)
    return overrides


BASES = ("paper", "quick", "small")


def library_kernel(kernel: str, name: str | None = None, base: str = "paper", **sizes: int) -> KernelSpec:
    """The library kernel `kernel` at its `base` shape (the paper's, the quick one whose spec runs
    in tens to hundreds of microseconds, or the tests' small one) with `sizes` replacing some of
    its sizes, as the library function `name` (default: the kernel's name), so that one library can
    hold a kernel at several shapes:

        library_kernel("matmul", "scores", m=256, k=64, n=256)"""
    if kernel not in KERNELS:
        raise LibraryError(f"no library kernel `{kernel}`; the library has {', '.join(KERNELS)}")
    generator = KERNELS[kernel]
    if base not in BASES:
        raise LibraryError(f"unknown base shape `{base}`; expected one of {', '.join(BASES)}")
    base_params = {"paper": generator.params, "quick": generator.quick_params, "small": generator.small_params}
    shape = {**base_params[base], **sizes}
    try:
        text = generator.generate(**shape)
    except ValueError as error:
        raise LibraryError(str(error)) from None
    words = " ".join(f"{k}={v}" for k, v in shape.items())
    return KernelSpec(name or kernel, text, f"library kernel {kernel} ({words})", library=kernel,
                      shape=tuple(shape.items()))


def _read(file: Path) -> tuple[str, Program]:
    try:
        text = read_source(file)
        return text, load(text)
    except DojoError as error:
        raise LibraryError(error.format(str(file))) from None


def _from_file(path: Path, read: tuple[str, Program] | None = None) -> KernelSpec:
    """The kernel of the file `path`, whose text and program `read` gives when it was read already."""
    text, program = read or _read(path)
    if program.derivation is None:
        return KernelSpec(path.stem, text, str(path))
    spec_text, _ = _read(spec_path(program, path))
    return KernelSpec(path.stem, spec_text, str(path), prefix=tuple(program.derivation.moves))


def _from_directory(directory: Path) -> list[KernelSpec]:
    """The kernels of the `.dojo` files of `directory`, in name order, without the files that another
    one names as its spec; LibraryError when there are none."""
    read = {path: _read(path) for path in sorted(p for p in directory.glob("*.dojo") if p.is_file())}
    specs = {spec_path(program, path).resolve() for path, (_, program) in read.items() if program.derivation}
    kernels = [_from_file(path, loaded) for path, loaded in read.items() if path.resolve() not in specs]
    if not kernels:
        raise LibraryError(f"{directory}: no .dojo files to build")
    return kernels


def _check_name(spec: KernelSpec) -> None:
    name = spec.name
    if (not IDENTIFIER.fullmatch(name) or keyword.iskeyword(name) or name.startswith("_") or name in RESERVED
            or len(name) > MAX_NAME):
        raise LibraryError(f"{spec.origin}: error: `{name[:MAX_NAME]}{'...' * (len(name) > MAX_NAME)}` cannot "
                           f"name a library function: it must be an identifier (letters, digits, `_`) of at most "
                           f"{MAX_NAME} characters, not starting with `_`, not a Python keyword and not a name the "
                           "library's Python module defines itself; rename the file")


def check_library_name(name: str) -> None:
    """LibraryError unless `name` can name a library's files (libNAME.so, NAME.h, NAME.py) and its C
    prefix without standing for a C keyword, a system header or library, or a Python module."""
    shown = f"`{name[:MAX_NAME]}{'...' * (len(name) > MAX_NAME)}`"
    if not IDENTIFIER.fullmatch(name) or keyword.iskeyword(name) or len(name) > MAX_NAME:
        raise LibraryError(f"the library's name {shown} must be an identifier (letters, digits, `_`) of at most "
                           f"{MAX_NAME} characters that is not a Python keyword")
    clash = ("a C keyword" if name in C_KEYWORDS or name.upper() in {"NULL", "EOF"}
             else "a system header's name" if name in _SYSTEM_HEADERS
             else "a system library's name (-l" + name + ")" if name in _SYSTEM_LIBRARIES
             else "a Python module's name" if name in _PYTHON_MODULES else None)
    if clash is not None:
        raise LibraryError(f"the library's name {shown} is {clash}: its files would stand for that one; "
                           "choose another --name")


def resolve(names: Sequence[str], shapes: Sequence[str] = (), base: str = "paper") -> list[KernelSpec]:
    """The kernels `names` name (library kernels or `.dojo` files), in order; see the module's
    docstring. Raises LibraryError for an unknown name, a bad size, a file with errors or two
    kernels with one name."""
    if not names:
        raise LibraryError("name at least one kernel: a library kernel or a .dojo file")
    overrides = _shape_overrides(shapes, names)
    specs = []
    for name in names:
        if name in KERNELS:
            specs.append(library_kernel(name, base=base, **overrides[name]))
        elif Path(name).is_dir():
            specs += _from_directory(Path(name))
        elif name.endswith(".dojo") or Path(name).exists():
            specs.append(_from_file(Path(name)))
        else:
            raise LibraryError(f"no kernel `{name}`: neither a library kernel ({', '.join(KERNELS)}) nor a "
                               ".dojo file")
    check_names(specs)
    return specs


def check_names(specs: Sequence[KernelSpec]) -> None:
    """Raise LibraryError unless every kernel can name a library function and no two share a name."""
    seen: dict[str, str] = {}
    for spec in specs:
        _check_name(spec)
        if spec.name in seen:
            raise LibraryError(f"two kernels would be named `{spec.name}`: {seen[spec.name]} and {spec.origin}")
        seen[spec.name] = spec.origin
