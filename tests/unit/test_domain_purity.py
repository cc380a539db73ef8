"""paycore.domain stays pure (docs/architecture.md, "Where does each rule live"): it imports
nothing that does I/O, reads a clock or draws randomness, and reads no clock itself (``now``
is passed in). The allow-list below is what it imports today; a new import is a decision to
make here, in the open, not in passing."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

DOMAIN = Path(__file__).resolve().parents[2] / "libs" / "paycore" / "paycore" / "domain.py"

# ``import x``: modules of values only.
PLAIN = frozenset({"dataclasses", "enum"})
# ``from x import names``: the names taken, each a type or a value-building helper.
FROM: dict[str, frozenset[str]] = {
    "__future__": frozenset({"annotations"}),
    "collections.abc": frozenset({"Mapping", "Sequence"}),
    "dataclasses": frozenset({"dataclass", "field"}),
    "datetime": frozenset({"datetime", "timedelta"}),  # as types and values, never to read the time
    "typing": frozenset({"TYPE_CHECKING", "Any"}),
    "uuid": frozenset({"UUID"}),  # the type; never uuid4
}
# Under ``if TYPE_CHECKING:`` only: annotations, never imported when the module runs.
TYPE_ONLY: dict[str, frozenset[str]] = {"paycore.providers.base": frozenset({"OperationOutcome"})}

# What reads a clock, whatever it is called on (datetime.now(), date.today(), time.monotonic()).
CLOCK_READS = frozenset({"now", "utcnow", "today", "time", "time_ns", "monotonic", "monotonic_ns",
                         "perf_counter", "perf_counter_ns"})
IO_BUILTINS = frozenset({"open", "print", "input", "exec", "eval", "compile", "__import__", "breakpoint"})


def _tree() -> ast.Module:
    return ast.parse(DOMAIN.read_text(encoding="utf-8"), filename=str(DOMAIN))


def _type_checking_blocks(tree: ast.Module) -> list[ast.If]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.If) and isinstance(n.test, ast.Name)
            and n.test.id == "TYPE_CHECKING"]


def _imports(nodes: Iterable[ast.AST]) -> tuple[set[str], dict[str, set[str]]]:
    plain: set[str] = set()
    taken: dict[str, set[str]] = {}
    for node in (n for top in nodes for n in ast.walk(top)):
        if isinstance(node, ast.Import):
            plain.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            taken.setdefault(module, set()).update(alias.name for alias in node.names)
    return plain, taken


def test_the_domain_imports_only_the_allowed_stdlib_names_when_it_runs() -> None:
    tree = _tree()
    guarded = {id(n) for block in _type_checking_blocks(tree) for n in ast.walk(block)}
    # Every statement of the module, nested ones too, outside an ``if TYPE_CHECKING:`` block.
    running = [n for n in ast.walk(tree)
               if isinstance(n, ast.Import | ast.ImportFrom) and id(n) not in guarded]
    plain, taken = _imports(running)
    assert plain - PLAIN == set()
    assert {m: sorted(names - FROM.get(m, frozenset())) for m, names in taken.items()
            if names - FROM.get(m, frozenset())} == {}
    assert "datetime" in taken and "dataclasses" in plain  # the scan sees the imports it pins


def test_the_domain_imports_for_annotations_only_under_type_checking() -> None:
    blocks = _type_checking_blocks(_tree())
    plain, taken = _imports(blocks)
    assert plain == set()
    assert {m: sorted(names) for m, names in taken.items()} == {m: sorted(n) for m, n in TYPE_ONLY.items()}


def test_the_domain_reads_no_clock_and_calls_no_io_builtin() -> None:
    found = []
    for node in ast.walk(_tree()):
        if isinstance(node, ast.Attribute) and node.attr in CLOCK_READS:
            found.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in IO_BUILTINS:
            found.append(f"{node.lineno}: {node.func.id}()")
    assert found == []
