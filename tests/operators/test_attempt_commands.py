"""``paycore attempts close`` and ``paycore escalations resolve-conflict``: what they print, and a
non-zero exit with the library's reason on a refusal (real PostgreSQL, the real ``main``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime
from uuid import UUID

import pytest

from harness.postgres import create_test_database, drop_database, with_database
from paycore import escalations
from paycore.clock import FakeClock
from paycore.db import create_pool
from paycore.domain import EscalationReason
from paycore_cli.main import main
from tests.matrix.helpers import seed_account, started_attempt
from tests.operators.test_dead_ends import escalate, unknown_attempt
from tests.support.timings import REMINDER_INTERVAL


@pytest.fixture
def database(pg_admin_dsn: str, pg_template: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    name = asyncio.run(create_test_database(pg_admin_dsn, pg_template))
    dsn = with_database(pg_admin_dsn, name)
    monkeypatch.setenv("PAYCORE_DATABASE_URL", dsn)
    try:
        yield dsn
    finally:
        asyncio.run(drop_database(pg_admin_dsn, name))


def seed_dead_end(dsn: str, *, escalated: bool = True) -> UUID:
    async def run() -> UUID:
        pool = await create_pool(dsn, max_size=2)
        try:
            clock = FakeClock(current=datetime.now(UTC))
            account = await seed_account(pool, clock)
            attempt = await unknown_attempt(pool, clock, account)
            if escalated:
                await escalate(pool, clock, attempt)
            return attempt.attempt_id
        finally:
            await pool.close()

    return asyncio.run(run())


def seed_identity_conflict(dsn: str) -> tuple[int, UUID]:
    """An identity-conflict episode naming two attempts, raised without a stored notification."""
    async def run() -> tuple[int, UUID]:
        pool = await create_pool(dsn, max_size=2)
        try:
            clock = FakeClock(current=datetime.now(UTC))
            account = await seed_account(pool, clock)
            a = await started_attempt(pool, clock, account)
            b = await started_attempt(pool, clock, account, customer="cus_2")
            async with pool.acquire() as conn, conn.transaction():
                escalation_id = await escalations.raise_escalation(
                    conn, key="notification:test:evt_x:identity-conflict",
                    reason=EscalationReason.IDENTITY_CONFLICT,
                    attempt_id=a.attempt_id, now=clock.now(), reminder_interval=REMINDER_INTERVAL,
                    detail={"reference_attempt_id": str(a.attempt_id),
                            "provider_payment_id_attempt_id": str(b.attempt_id)})
            assert escalation_id is not None
            return escalation_id, b.attempt_id
        finally:
            await pool.close()

    return asyncio.run(run())


CLOSE = ["--operator", "ops-1", "--reason", "nothing at Cardco", "--checked", "dashboard search by reference"]


def test_attempts_close_prints_the_recorded_action_and_a_second_close_is_refused(
    database: str, capsys: pytest.CaptureFixture[str],
) -> None:
    attempt_id = seed_dead_end(database)
    assert main(["attempts", "close", str(attempt_id), *CLOSE]) == 0
    out = capsys.readouterr().out
    assert "attempt-close-not-charged by ops-1" in out and "state: Unknown → Failed" in out
    assert "checked at provider: dashboard search by reference" in out
    assert "the order can be paid again" in out
    assert main(["attempts", "close", str(attempt_id), *CLOSE]) == 1
    err = capsys.readouterr().err
    assert "is Failed; only an Unknown attempt" in err and "Traceback" not in err


def test_attempts_close_refuses_an_attempt_that_is_no_dead_end_and_bad_input(
    database: str, capsys: pytest.CaptureFixture[str],
) -> None:
    attempt_id = seed_dead_end(database, escalated=False)
    assert main(["attempts", "close", str(attempt_id), *CLOSE]) == 1
    assert "no open dead-end escalation" in capsys.readouterr().err
    assert main(["attempts", "close", "not-a-uuid", *CLOSE]) == 2
    assert "not an attempt id" in capsys.readouterr().err
    assert main(["attempts", "close", "00000000-0000-0000-0000-000000000001", *CLOSE]) == 1
    assert "Traceback" not in capsys.readouterr().err
    with pytest.raises(SystemExit) as missing:
        main(["attempts", "close", str(attempt_id), "--operator", "ops-1", "--reason", "r"])
    assert missing.value.code == 2 and "--checked" in capsys.readouterr().err


def test_resolve_conflict_needs_owner_or_neither_and_reports_a_refusal(
    database: str, capsys: pytest.CaptureFixture[str],
) -> None:
    escalation_id, b = seed_identity_conflict(database)
    args = ["escalations", "resolve-conflict", str(escalation_id),
            "--operator", "ops-1", "--reason", "checked"]
    with pytest.raises(SystemExit):
        main(args)
    capsys.readouterr()
    assert main([*args, "--owner", str(b)]) == 1
    assert "refers to no stored notification" in capsys.readouterr().err
    assert main([*args, "--neither"]) == 0
    out = capsys.readouterr().out
    assert "escalation-resolve-conflict by ops-1" in out and "neither attempt owns the payment" in out
    assert main([*args, "--neither"]) == 1
    assert "is not open" in capsys.readouterr().err


def test_an_action_with_json_prints_the_recorded_action_alone_for_scripts(
    database: str, capsys: pytest.CaptureFixture[str],
) -> None:
    """``--json`` on every operator action: one JSON document (the recorded action with its state
    before and after), nothing else on stdout; a refusal still exits non-zero."""
    import json

    attempt_id = seed_dead_end(database)
    assert main(["attempts", "close", str(attempt_id), *CLOSE, "--json"]) == 0
    recorded = json.loads(capsys.readouterr().out)
    assert (recorded["action"], recorded["operator"], recorded["attempt_id"]) == (
        "attempt-close-not-charged", "ops-1", str(attempt_id))
    assert (recorded["state_before"]["state"], recorded["state_after"]["state"]) == ("Unknown", "Failed")
    assert main(["attempts", "close", str(attempt_id), *CLOSE, "--json"]) == 1
    assert capsys.readouterr().out == ""
