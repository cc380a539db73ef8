"""tools/mutations.py stays true to the tree, so ``make mutate`` (not in CI) cannot rot unseen.

Each check is one way an entry has silently tested nothing or the wrong thing: two
entries of one name, an original text that moved (``stale``) or is ambiguous, a test
that was renamed, and a module constant assigned twice (a second ``ACCOUNTS_TESTS``
once pointed a mutation at another file's tests, and only the full run noticed).
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

from tools.mutations import MUTATIONS, Mutation

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "tools" / "mutations.py"


def defines_test(source: str, name: str) -> bool:
    """Whether ``source`` defines the test ``name`` (a parametrized id counts by its base name)."""
    base = name.split("[", 1)[0]
    return re.search(rf"^\s*(async )?def {re.escape(base)}\(", source, re.M) is not None


def missing_tests(m: Mutation) -> list[str]:
    missing = []
    for node in m.tests:
        path, _, name = node.partition("::")
        file = ROOT / path
        if not file.is_file():
            missing.append(f"{node}: no file {path}")
        elif name and not defines_test(file.read_text(encoding="utf-8"), name):
            missing.append(f"{node}: {path} defines no {name.split('[', 1)[0]}")
    return missing


def test_mutation_names_are_unique() -> None:
    twice = sorted(n for n, count in Counter(m.name for m in MUTATIONS).items() if count > 1)
    assert twice == []


def test_each_original_text_occurs_exactly_once_in_its_file() -> None:
    wrong = []
    for m in MUTATIONS:
        file = ROOT / m.file
        found = file.read_text(encoding="utf-8").count(m.original) if file.is_file() else "no file"
        if found != 1:
            wrong.append(f"{m.name}: {m.file}: found {found}")
    assert wrong == []


def test_each_mutation_changes_its_text_and_names_tests() -> None:
    assert [m.name for m in MUTATIONS if m.original == m.replacement or not m.tests] == []


def test_every_named_test_exists() -> None:
    assert [problem for m in MUTATIONS for problem in missing_tests(m)] == []


def test_no_module_level_name_in_the_table_is_assigned_twice() -> None:
    assigned: Counter[str] = Counter()
    for statement in ast.parse(TABLE.read_text(encoding="utf-8")).body:
        if isinstance(statement, ast.Assign):
            targets = statement.targets
        elif isinstance(statement, ast.AnnAssign | ast.AugAssign):
            targets = [statement.target]
        elif isinstance(statement, ast.FunctionDef | ast.ClassDef):
            assigned[statement.name] += 1
            targets = []
        else:
            targets = []
        for target in targets:
            assigned.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    assert sorted(n for n, count in assigned.items() if count > 1) == []
