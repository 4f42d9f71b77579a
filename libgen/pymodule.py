"""The Python module of a library: the code of runtime.py, then the lines that load the library
that it sits beside (its manifest.json and shared library), export each kernel as a numpy function
and register the PyTorch operators."""

from __future__ import annotations

from pathlib import Path

_TAIL = '''

# -- this library: written by `dojo library build` ------------------------------------------------

library = Library(Path(__file__).resolve().parent)
globals().update(library.numpy_functions())
ops = library.torch_ops()
'''


def module_text() -> str:
    return Path(__file__).with_name("runtime.py").read_text(encoding="utf-8") + _TAIL
