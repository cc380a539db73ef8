"""The webhook bench's pgbench baseline stays the intake's own SQL.

``bench/webhooks_baseline.sql`` names, above each statement, the named query
(``<table>.sql:<name>``) or code constant it comes from. Each statement must be that SQL
with its ``$n`` parameters written as pgbench expressions, and the list must be, in order,
what a real intake sends to PostgreSQL for the bench's two kinds of delivery: a first one,
and a redelivery of a committed one.
"""

from __future__ import annotations

import importlib
import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson

from bench.webhooks import event_body, seed
from paycore import queries
from paycore.db import create_pool
from paycore.providers.registry import notification_format
from paycore.webhook_replays import SignedDelivery
from paycore_webhooks.handler import DeliveryResult, handle_notification
from tests.support.webhooks import TEST, intake_settings

BASELINE = "bench/webhooks_baseline.sql"
# What asyncpg's transactions send around the statements (savepoint names vary).
FRAMING = {"BEGIN;": "BEGIN", "COMMIT;": "COMMIT"}


def _normal(sql: str) -> str:
    return " ".join(sql.split())


def baseline_statements(text: str) -> list[tuple[str, str]]:
    """(source, statement) in file order; the source is ``module.CONSTANT`` or the framing's keyword."""
    found: list[tuple[str, str]] = []
    source: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("-- from: "):
            source = stripped.removeprefix("-- from: ")
            continue
        if stripped.startswith(("--", "\\")) or not stripped:
            continue
        if stripped in FRAMING or stripped.startswith(("SAVEPOINT ", "RELEASE SAVEPOINT ")):
            found.append((stripped.split()[0].rstrip(";"), stripped))
            continue
        lines.append(line)
        if stripped.endswith((";", "\\gset")):
            assert source is not None, f"no '-- from:' above {lines[0]!r}"
            statement = "\n".join(lines).removesuffix("\\gset").rstrip().removesuffix(";")
            if not source.startswith("bench "):  # the bench's own plumbing
                found.append((source, statement))
            source, lines = None, []
    assert not lines, f"unterminated statement: {lines}"
    return found


def constant(source: str) -> str:
    """The SQL ``source`` names: ``<table>.sql:<query>`` (paycore/queries) or ``module.CONSTANT``."""
    if ".sql:" in source:
        table, query = source.split(".sql:")
        return queries.load(table)[query].sql
    module, name = source.rsplit(".", 1)
    value = getattr(importlib.import_module(module), name)
    assert isinstance(value, str)
    return value


def shape(sql: str) -> re.Pattern[str]:
    """The constant as a pattern: same text up to whitespace, each ``$n`` any expression."""
    parts = re.split(r"\$\d+", _normal(sql).strip())
    return re.compile(r"(.+?)".join(re.escape(p).replace(r"\ ", r"\s*") for p in parts))


def baseline() -> list[tuple[str, str]]:
    return baseline_statements(Path(BASELINE).read_text(encoding="utf-8"))


def test_each_baseline_statement_is_the_code_constant_it_names() -> None:
    statements = baseline()
    named = [(source, sql) for source, sql in statements if "." in source]
    assert len(named) >= 10
    for source, sql in named:
        assert shape(constant(source)).fullmatch(_normal(sql)), f"{source} differs from the code:\n{sql}"


def is_sent(source: str, query: str) -> bool:
    """Whether ``query`` (as asyncpg sent it) is the baseline's statement from ``source``."""
    if "." in source:
        return _normal(query) == _normal(constant(source))
    return _framing(query) == source.upper()


def plumbing(query: str) -> bool:
    """asyncpg's own queries, not the intake's work: the default reset of a released connection,
    and the one-time introspection of a type it meets first on this connection (``jsonb[]``),
    which it runs with JIT switched off and back."""
    text = " ".join(query.split()).upper()
    return text.startswith(("SELECT PG_ADVISORY_UNLOCK_ALL", "WITH RECURSIVE TYPEINFO_TREE",
                            "SELECT CURRENT_SETTING('JIT')", "SELECT SET_CONFIG('JIT'"))


def _framing(query: str) -> str | None:
    word = query.strip().split()[0].rstrip(";").upper()
    return word if word in ("BEGIN", "COMMIT", "SAVEPOINT", "RELEASE", "ROLLBACK") else None


async def test_the_baseline_runs_what_the_intake_sends_for_a_first_delivery_and_a_redelivery(
    db_dsn: str,
) -> None:
    await seed(db_dsn, 1)  # the bench's seed: one order with a Started attempt
    sent: list[str] = []

    def record(logged: object) -> None:
        sent.append(getattr(logged, "query"))  # noqa: B009 -- asyncpg's LoggedQuery record

    settings = intake_settings("http://127.0.0.1:1", db_dsn)
    account = next(a for a in settings.accounts if a.provider_account == TEST)
    body = event_body(1)
    n = notification_format(TEST).parse_notification(body)
    key = notification_format(TEST).notification_key(n)
    now = datetime.now(UTC)
    watched = await create_pool(db_dsn, min_size=1, max_size=1)  # the intake's kind of pool, one connection
    try:
        async with watched.acquire() as conn:
            conn.add_query_logger(record)  # stays on the pool's one connection
        results = []
        for _ in range(2):  # the bench's mix: each event twice
            sent.clear()
            results.append(await handle_notification(
                watched, account=account, n=n, key=key, now=now,
                delivery=SignedDelivery("evt_bench_1", int(time.time())),
                reminder_interval=timedelta(hours=1), recheck_after_s=60))
            if results[-1] is not DeliveryResult.DUPLICATE:
                first = list(sent)
        second = list(sent)
    finally:
        await watched.close()
    assert results == [DeliveryResult.APPLIED, DeliveryResult.DUPLICATE]
    assert orjson.loads(body)["id"] == key

    expected = [source for source, _ in baseline()]
    # The file: the redelivery check, then (first deliveries only) the transaction.
    sent_first = [q for q in first if not plumbing(q)]
    second = [q for q in second if not plumbing(q)]
    assert len(second) == 1 and is_sent(expected[0], second[0]), second
    assert len(sent_first) == len(expected), "\n".join(sent_first)
    for query, source in zip(sent_first, expected, strict=True):
        assert is_sent(source, query), f"the intake sent, where the baseline has {source}:\n{query}"
