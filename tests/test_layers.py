"""The packages are layers (README.md, "Layout"): each imports only the layers before it, and none
imports bench/ or tests/, which are not part of what is installed.

Every import statement of every module counts, also those inside functions (imported when asked
for) and under `if TYPE_CHECKING:`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("dojo_ir", "codegen", "runner", "agent", "libgen", "server")
OUTSIDE = ("bench", "tests")


def imported(path: Path) -> set[str]:
    """The top-level names of the absolute imports in the module at `path`."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.partition(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.partition(".")[0])
    return names


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", LAYERS)
def test_no_package_imports_bench_or_the_tests(package: str) -> None:
    offending = {str(p.relative_to(ROOT)): sorted(imported(p) & set(OUTSIDE)) for p in modules(package)}
    assert {p: names for p, names in offending.items() if names} == {}


@pytest.mark.parametrize("package", LAYERS)
def test_a_layer_imports_only_the_layers_before_it(package: str) -> None:
    later = set(LAYERS[LAYERS.index(package) + 1:])
    offending = {str(p.relative_to(ROOT)): sorted(imported(p) & later) for p in modules(package)}
    assert {p: names for p, names in offending.items() if names} == {}


def test_the_walk_sees_imports_inside_functions(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from bench import peers\n    import tests.x\n", encoding="utf-8")
    assert imported(module) == {"bench", "tests"}
    # under `if TYPE_CHECKING:` too; a relative import stays inside its own package
    module.write_text("from typing import TYPE_CHECKING\nfrom .bench import local\nif TYPE_CHECKING:\n"
                      "    from server.lsp import x\n", encoding="utf-8")
    assert imported(module) == {"typing", "server"}
