"""The generated run's mutants: SQL predicates, orders, locks and constraints, and which Python
mutants are made at all (``tools.sql_mutants``, ``tools.mutate_generated``)."""

from __future__ import annotations

from tools.mutate_generated import python_mutants, sample
from tools.sql_mutants import mutants_of

MODULE = '''
CLAIM = """
SELECT * FROM outbox_messages m
WHERE m.dispatched_at IS NULL AND m.next_attempt_at <= $1
  AND NOT EXISTS (SELECT 1 FROM outbox_messages p WHERE p.key = m.key AND p.id < m.id)
ORDER BY m.next_attempt_at, m.id
LIMIT $2
FOR NO KEY UPDATE OF m SKIP LOCKED
"""

WRITE = """
UPDATE payment_attempts
SET provider_payment_id = COALESCE(provider_payment_id, $9), note = 'a AND b'
WHERE attempt_id = $1 AND version = $2
"""  + SUFFIX + """ AND state = $3
RETURNING *
"""

NOT_SQL = "WHERE this is prose"
'''


def changes(source: str) -> list[tuple[str, str, str]]:
    return [(m.operator, source[m.start:m.end], m.replacement) for m in mutants_of("m.py", source)]


def test_each_top_level_conjunct_is_dropped_keeping_its_parameters_and_its_comparison_flipped() -> None:
    found = changes(MODULE)
    dropped = [(old, new) for op, old, new in found if op == "drop-conjunct"]
    assert ("m.next_attempt_at <= $1", "(m.next_attempt_at <= $1 OR TRUE)") in dropped
    assert ("version = $2", "(version = $2 OR TRUE)") in dropped
    assert ("state = $3", "(state = $3 OR TRUE)") in dropped  # a literal glued on with +
    # The subquery is one conjunct of the outer WHERE, and its own WHERE has its own.
    assert any(old.startswith("NOT EXISTS (") and old.endswith(")") for old, _ in dropped)
    assert ("p.id < m.id", "(p.id < m.id OR TRUE)") in dropped
    flips = [(old, new) for op, old, new in found if op == "flip-comparison"]
    assert ("IS NULL", "IS NOT NULL") in flips and ("<=", "<") in flips and ("<", "<=") in flips
    # A quoted 'a AND b' is not a conjunction; prose is not SQL.
    assert not any("'a" in old for old, _ in dropped)
    assert not any("prose" in old for _, old, _ in found)


def test_order_locks_and_coalesce_are_mutated() -> None:
    found = changes(MODULE)
    assert ("drop-order-by", "ORDER BY m.next_attempt_at, m.id", "") in found
    assert ("drop-lock", "\nFOR NO KEY UPDATE OF m SKIP LOCKED", "") in found
    assert ("drop-skip-locked", " SKIP LOCKED", "") in found
    assert ("swap-coalesce", "provider_payment_id, $9", "$9, provider_payment_id") in found


def test_a_mutant_applies_by_replacing_its_range_of_the_pristine_file() -> None:
    [order] = [m for m in mutants_of("m.py", MODULE) if m.operator == "drop-order-by"]
    mutated = order.apply(MODULE)
    assert "ORDER BY" not in mutated and "LIMIT $2" in mutated
    assert order.line == MODULE[:order.start].count("\n") + 1


def test_a_migrations_checks_and_uniqueness_are_dropped() -> None:
    sql = ("CREATE TABLE t (a int CHECK (a > 0 AND (a < 10)), b text, UNIQUE (a, b));\n"
           "CREATE UNIQUE INDEX one_b ON t (b) WHERE a IS NOT NULL;\n")
    found = [(m.operator, sql[m.start:m.end], m.replacement) for m in mutants_of("0001.sql", sql)]
    assert found == [("drop-check", "CHECK (a > 0 AND (a < 10))", "CHECK (TRUE)"),
                     ("drop-unique", "CREATE UNIQUE INDEX", "CREATE INDEX"),
                     ("drop-unique", "UNIQUE (a, b)", "CHECK (TRUE)")]


def test_no_python_mutant_is_made_in_an_annotation_or_a_parameter_list() -> None:
    source = ("from __future__ import annotations\n"
              "def f(a: int | None, *, b: bool = True) -> str | None:\n"
              "    return None if a is None or b else str(a + 1)\n")
    lines = {m.line for m in python_mutants("f.py", source)}
    assert lines == {3}


def test_a_sample_takes_each_files_fastest_tests_in_turn() -> None:
    tests = ["a.py::1", "a.py::2", "a.py::3", "b.py::1", "c.py::1", "c.py::2"]
    assert sample(tests, 4) == ["a.py::1", "b.py::1", "c.py::1", "a.py::2"]
    assert sample(tests, 10) == tests


QUERY_FILE = """-- outbox: the header says what the table is for.

-- name: claim
-- Why it is written so (the doc is not SQL: nothing in it is mutated, AND stays).
SELECT * FROM outbox_messages
WHERE dispatched_at IS NULL AND next_attempt_at <= :now
ORDER BY next_attempt_at
FOR NO KEY UPDATE SKIP LOCKED

-- A section comment, after the query.

-- name: mark
UPDATE outbox_messages SET dispatched_at = :now WHERE message_id = :message_id
"""


def test_a_named_query_files_statements_are_mutated_each_under_its_name() -> None:
    from tools.sql_mutants import query_at

    found = mutants_of("libs/paycore/paycore/queries/outbox_messages.sql", QUERY_FILE)
    assert {(m.operator, QUERY_FILE[m.start:m.end]) for m in found} >= {
        ("drop-conjunct", "dispatched_at IS NULL"), ("drop-conjunct", "next_attempt_at <= :now"),
        ("drop-order-by", "ORDER BY next_attempt_at"), ("drop-conjunct", "message_id = :message_id")}
    assert {query_at(QUERY_FILE, m.start) for m in found} == {"claim", "mark"}
    docs = QUERY_FILE.index("-- Why"), QUERY_FILE.index("SELECT")
    assert not [m for m in found if docs[0] <= m.start < docs[1]]  # comments are not SQL
