"""docs/conformance.md names real tests: every `path::test_name` it cites must exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")


def test_every_test_named_in_the_conformance_table_exists() -> None:
    doc = (ROOT / "docs" / "conformance.md").read_text(encoding="utf-8")
    refs = REFERENCE.findall(doc)
    assert len(refs) > 50
    missing = [
        f"{path}::{name}"
        for path, name in refs
        if not (ROOT / path).exists()
        or not re.search(rf"^(async )?def {name}\(", (ROOT / path).read_text(encoding="utf-8"), re.M)
    ]
    assert missing == []


def test_every_matrix_line_and_checklist_item_has_a_row() -> None:
    doc = (ROOT / "docs" / "conformance.md").read_text(encoding="utf-8")
    assert [int(n) for n in re.findall(r"^\| M(\d+) \|", doc, re.M)] == list(range(1, 92))
    assert [int(n) for n in re.findall(r"^\| C(\d+) \|", doc, re.M)] == list(range(1, 24))


def test_each_section_of_issue_8_names_its_tests() -> None:
    """The edges issue 8 found are outside the matrix; its own section keeps them named."""
    doc = (ROOT / "docs" / "conformance.md").read_text(encoding="utf-8")
    section = doc.split("## Beyond the matrix: the edges of issue 8", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\d) [^|]+\|[^|]+\|(.+)\|$", section, re.M)
    assert sorted({int(n) for n, _ in rows}) == list(range(2, 9))
    assert [n for n, tests in rows if not REFERENCE.search(tests)] == []


def test_each_guard_of_issue_26_names_its_test_and_a_listed_mutation() -> None:
    """The guards the outside audit found unprotected stay named with what keeps them killed."""
    from tools.mutations import MUTATIONS

    doc = (ROOT / "docs" / "conformance.md").read_text(encoding="utf-8")
    section = doc.split("## Beyond the matrix: the guards of issue 26", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| ([^|]+)\|([^|]+)\|([^|]+)\|$", section, re.M)[1:]  # after the header
    assert len(rows) == 6
    listed = {m.name for m in MUTATIONS}
    for _, tests, mutations in rows:
        assert REFERENCE.search(tests)
        named = re.findall(r"`([a-z0-9-]+)`", mutations)
        assert named and set(named) <= listed, named


def test_every_mutation_a_table_names_is_in_make_mutate() -> None:
    """A mutations column names entries of tools/mutations.py: a renamed entry is renamed here too."""
    from tools.mutations import MUTATIONS

    listed = {m.name for m in MUTATIONS}
    named: list[str] = []
    in_mutation_table = False
    for line in (ROOT / "docs" / "conformance.md").read_text(encoding="utf-8").splitlines():
        if not line.startswith("|"):
            in_mutation_table = False
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[-1] in ("mutation", "mutations"):
            in_mutation_table = True
        elif in_mutation_table and not set(cells[-1]) <= set("-: "):
            named += re.findall(r"`([a-z0-9]+(?:-[a-z0-9]+)+)`", cells[-1])
    assert len(named) > 50
    assert sorted(set(named) - listed) == []
