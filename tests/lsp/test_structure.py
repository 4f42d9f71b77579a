"""The features share what they share through server/lsp/requests.py, never by importing one another."""

from __future__ import annotations

import ast
from pathlib import Path

FEATURES = Path(__file__).resolve().parents[2] / "server" / "lsp" / "features"


def test_no_feature_imports_another():
    found = []
    for path in sorted(FEATURES.glob("*.py")):
        if path.name == "__init__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.level == 1 or (node.module or "").startswith(
                    "server.lsp.features")):
                found.append(f"{path.name}: from {'.' * node.level}{node.module or ''} import ...")
    assert found == []
