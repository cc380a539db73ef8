"""paycore.queries: the named-query files and their loader.

What a reader of a ``.sql`` file relies on: a ``:name`` binds by name (never a cast's colon, a
string or a comment), a call that forgets or invents a name fails before PostgreSQL sees it,
every query in a file is run by some code and every query the code names exists, and the live
states are written everywhere exactly as the partial index that keeps one live attempt per order.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from paycore import queries
from paycore.domain import LIVE_STATE_PREDICATE
from paycore.queries import QUERIES_DIR, QueryFileError, parse

ROOT = Path(__file__).resolve().parents[2]
CODE = [p for top in ("libs", "services", "cli", "devstack", "bench")
        for p in (ROOT / top).rglob("*.py") if ".venv" not in p.parts]
# The library's files (one per table) and each service's own read models.
SQL_FILES = sorted([*QUERIES_DIR.glob("*.sql"), *ROOT.glob("services/*/paycore_*/queries/*.sql")])
# A module-level handle on a file: ``ATTEMPTS = queries.load("payment_attempts")``, a service's with
# ``directory=`` (its own folder's ``queries/``).
HANDLE = re.compile(r'^(\w+)(?:: \w+)? = queries\.load\(\s*"(\w+)"(,\s*directory=[^)]*)?\)', re.M)


def handles() -> dict[str, Path]:
    """Every handle name in the code and the file it loads; one name, one file."""
    found: dict[str, Path] = {}
    for p in CODE:
        for name, table, elsewhere in HANDLE.findall(p.read_text(encoding="utf-8")):
            path = (p.parent / "queries" if elsewhere else QUERIES_DIR) / f"{table}.sql"
            assert path.is_file(), f"{p.relative_to(ROOT)}: {name} loads {path}, which does not exist"
            assert found.setdefault(name, path) == path, f"the handle {name} names two files"
    return found


def test_parameters_are_numbered_in_first_use_order_and_bound_by_name() -> None:
    q = parse("-- name: pay\n-- the doc\nUPDATE t SET a = :b, c = :a::uuid[] WHERE d = :b\n").pay
    assert q.sql == "UPDATE t SET a = $1, c = $2::uuid[] WHERE d = $1"
    assert (q.params, q.doc) == (("b", "a"), "the doc")
    assert q.args(a=1, b=2) == (2, 1)


def test_casts_strings_quoted_names_and_comments_hold_no_parameters() -> None:
    q = parse("-- name: q\nSELECT now()::date, ':x', \"a:b\", x -- see :y\nFROM t WHERE z = :z\n").q
    assert q.params == ("z",)
    assert "':x'" in q.sql and '"a:b"' in q.sql and "-- see :y" in q.sql and "now()::date" in q.sql


def test_a_comment_after_a_query_belongs_to_what_follows_not_to_the_query() -> None:
    loaded = parse("-- name: a\nSELECT 1\n\n-- Escalations, read for notifications:\n\n"
                   "-- name: b\nSELECT 2\n")
    assert (loaded.a.sql, loaded.b.sql) == ("SELECT 1", "SELECT 2")


def test_a_call_that_forgets_or_invents_a_name_fails_before_the_database() -> None:
    q = parse("-- name: q\nSELECT :a, :b\n").q
    with pytest.raises(TypeError, match="missing b"):
        q.args(a=1)
    with pytest.raises(TypeError, match="unknown c"):
        q.args(a=1, b=2, c=3)


@pytest.mark.parametrize("text", ["SELECT 1\n-- name: q\nSELECT 2\n",  # SQL without a name
                                  "-- name: q\nSELECT 1\n-- name: q\nSELECT 2\n",  # a name twice
                                  "-- name: q\n-- only a comment\n"])  # a name without SQL
def test_a_file_that_does_not_say_what_it_runs_is_refused(text: str) -> None:
    with pytest.raises(QueryFileError):
        parse(text)


def test_an_unknown_query_name_says_which_file() -> None:
    with pytest.raises(AttributeError, match=r"payment_attempts\.sql has no query named nope"):
        _ = queries.load("payment_attempts").nope


def test_every_query_in_a_file_is_run_by_the_code_and_every_one_it_names_exists() -> None:
    code = "\n".join(p.read_text(encoding="utf-8") for p in CODE)
    assert SQL_FILES
    for path in SQL_FILES:
        loaded = queries.parse(path.read_text(encoding="utf-8"), path.name)
        unused = [name for name in loaded if not re.search(rf"\.{name}\b", code)]
        assert not unused, f"{path.relative_to(ROOT)}: queries no code runs: {unused}"
    # Every query named through a handle exists in the file the handle loads.
    by_handle = handles()
    assert set(by_handle.values()) == set(SQL_FILES), "a query file nothing loads"
    for p in CODE:
        text = p.read_text(encoding="utf-8")
        for handle, path in by_handle.items():
            loaded = queries.parse(path.read_text(encoding="utf-8"), path.name)
            for name in re.findall(rf"\b{handle}\.(\w+)", text):
                assert name in loaded, f"{p.relative_to(ROOT)}: {path.name} has no query {name}"


def test_the_live_states_are_written_everywhere_as_the_partial_index_writes_them() -> None:
    live_lists = [(path.name, m.group(0)) for path in SQL_FILES
                  for m in re.finditer(r"state IN \([^)]*\)", path.read_text(encoding="utf-8"))]
    assert live_lists
    for name, written in live_lists:
        assert written == LIVE_STATE_PREDICATE, f"{name}: {written}"


def test_every_package_with_query_files_ships_them_in_its_wheel() -> None:
    """The deployment image is built from wheels: a query file left out is a service that fails to
    import in production only."""
    folders = sorted({path.parent for path in SQL_FILES})
    assert len(folders) > 1
    for folder in folders:
        package = folder.parent
        project = tomllib.loads((package.parent / "pyproject.toml").read_text(encoding="utf-8"))
        assert "queries/*.sql" in project["tool"]["setuptools"]["package-data"][package.name], package
