"""A service's own named queries (``services/<svc>/paycore_<svc>/queries/*.sql``).

What tests/unit/test_queries.py holds for the library's files, for a service's: every query in a
file is run by that service's code and every query its code names exists, the live states are
written as the partial index writes them, and the service's wheel ships the files (the
deployment image is built from wheels).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from paycore import queries
from paycore.domain import LIVE_STATE_PREDICATE

ROOT = Path(__file__).resolve().parents[2]
QUERY_DIRS = sorted(p for p in (ROOT / "services").glob("*/paycore_*/queries") if p.is_dir())
# A handle on one of the package's files: NAME = queries.load("table", directory=...)
HANDLE = re.compile(r"^(\w+) = queries\.load\(\"(\w+)\", directory=", re.M)


@pytest.mark.parametrize("folder", QUERY_DIRS, ids=lambda p: p.parent.name)
def test_every_query_is_run_by_its_service_and_every_one_it_names_exists(folder: Path) -> None:
    code = {p: p.read_text(encoding="utf-8") for p in folder.parent.rglob("*.py")}
    everything = "\n".join(code.values())
    for path in sorted(folder.glob("*.sql")):
        loaded = queries.load(path.stem, directory=folder)
        unused = [name for name in loaded if not re.search(rf"\.{name}\b", everything)]
        assert not unused, f"{path.relative_to(ROOT)}: queries no code runs: {unused}"
    for p, text in code.items():
        for handle, table in HANDLE.findall(text):
            loaded = queries.load(table, directory=folder)
            for name in re.findall(rf"\b{handle}\.(\w+)", text):
                assert name in loaded, f"{p.relative_to(ROOT)}: {table}.sql has no query {name}"


@pytest.mark.parametrize("folder", QUERY_DIRS, ids=lambda p: p.parent.name)
def test_the_live_states_are_written_as_the_partial_index_writes_them(folder: Path) -> None:
    for path in folder.glob("*.sql"):
        for written in re.findall(r"state IN \([^)]*\)", path.read_text(encoding="utf-8")):
            assert written == LIVE_STATE_PREDICATE, f"{path.relative_to(ROOT)}: {written}"


@pytest.mark.parametrize("folder", QUERY_DIRS, ids=lambda p: p.parent.name)
def test_the_services_wheel_ships_its_queries(folder: Path) -> None:
    package = folder.parent
    project = tomllib.loads((package.parent / "pyproject.toml").read_text(encoding="utf-8"))
    assert "queries/*.sql" in project["tool"]["setuptools"]["package-data"][package.name]
