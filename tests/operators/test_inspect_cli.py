"""``paycore escalations list|show``, ``attempts show``, ``notifications unmatched`` and ``outbox
dead-letters`` through the command's own entry point, on a real PostgreSQL database."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from paycore import escalations, outbox_admin
from paycore.attempts import Attempt
from paycore.clock import FakeClock
from paycore.notifications import record_notification
from paycore_cli.main import main
from tests.matrix.helpers import seed_account, started_attempt

from .test_inspection import REMINDER, episode, queued


@pytest.fixture
async def seeded(pool: asyncpg.Pool, clock: FakeClock, db_dsn: str,
                 monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """One Started attempt with an acknowledged deadline episode, a second open episode, an unmatched
    notification and a dead-lettered confirmation; the CLI pointed at the database."""
    account = await seed_account(pool, clock)
    attempt: Attempt = await started_attempt(pool, clock, account)
    first = await episode(pool, clock.now(), "deadline", attempt_id=attempt.attempt_id)
    clock.advance(60)
    second = await episode(pool, clock.now(), "unmatched-payment",
                           detail={"provider_account": account.provider_account})
    await escalations.acknowledge(pool, first, operator="alice", reason=None, now=clock.now(),
                                  reminder_interval=REMINDER)
    async with pool.acquire() as conn, conn.transaction():
        note = await record_notification(
            conn, provider_account=account.provider_account, key="evt_cli", attempt_id=None, now=clock.now(),
            detail={"type": "payment.succeeded", "provider_payment_id": "pay_cli", "event": {"x": "whsec_1"}})
    dead = await queued(pool, clock, "order-confirmation", attempt_id=attempt.attempt_id, dead=True,
                        error="broker down")
    monkeypatch.setenv("PAYCORE_DATABASE_URL", db_dsn)
    return {"attempt": attempt, "first": first, "second": second, "event": note.event_id, "dead": dead}


async def paycore(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = await asyncio.to_thread(main, list(args))
    out, err = capsys.readouterr()
    return code, out, err


async def test_escalations_list_prints_an_aligned_table_open_first_and_json_for_scripts(
    seeded: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = await paycore(capsys, "escalations", "list")
    assert code == 0
    header, *rows = out.splitlines()
    assert header.split() == ["ID", "STATUS", "REASON", "ACCOUNT", "RAISED", "(UTC)", "ATTEMPT", "REMINDERS"]
    assert [r.split()[:3] for r in rows] == [[str(seeded["first"]), "acknowledged", "deadline"],
                                             [str(seeded["second"]), "open", "unmatched-payment"]]
    assert len({header.index("REASON")} | {r.index(r.split()[2]) for r in rows}) == 1  # one column

    code, out, _ = await paycore(capsys, "escalations", "list", "--unacknowledged", "--json")
    document = json.loads(out)
    assert code == 0 and document["next_cursor"] is None
    assert [e["escalation_id"] for e in document["items"]] == [seeded["second"]]

    code, out, _ = await paycore(capsys, "escalations", "list", "--limit", "1", "--json")
    page = json.loads(out)
    assert [e["escalation_id"] for e in page["items"]] == [seeded["first"]] and page["next_cursor"]
    code, out, _ = await paycore(capsys, "escalations", "list", "--limit", "1",
                                 "--cursor", page["next_cursor"])
    assert code == 0 and out.splitlines()[1].split()[0] == str(seeded["second"])
    assert "more: --cursor" not in out

    code, out, _ = await paycore(capsys, "escalations", "list", "--reason", "deadline", "--acknowledged",
                                 "--account", seeded["attempt"].provider_account, "--json")
    assert [e["escalation_id"] for e in json.loads(out)["items"]] == [seeded["first"]]


async def test_a_bad_cursor_or_limit_is_refused_with_exit_2(seeded: dict[str, Any],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    for command in (["escalations", "list"], ["notifications", "unmatched"], ["outbox", "dead-letters"]):
        code, out, err = await paycore(capsys, *command, "--cursor", "garbage!")
        assert (code, out) == (2, "") and "cursor is not one this listing made" in err
        code, out, err = await paycore(capsys, *command, "--limit", "501")
        assert (code, out) == (2, "") and "limit must be between 1 and 500" in err


async def test_escalations_show_prints_the_episode_and_its_actions(
    seeded: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = await paycore(capsys, "escalations", "show", str(seeded["first"]))
    assert code == 0
    assert out.startswith(f"escalation {seeded['first']}: deadline, acknowledged")
    assert f"attempt {seeded['attempt'].attempt_id}" in " ".join(out.split())
    assert "escalation-acknowledge" in out and "alice" in out
    code, out, _ = await paycore(capsys, "escalations", "show", str(seeded["first"]), "--json")
    document = json.loads(out)
    assert document["escalation"]["escalation_id"] == seeded["first"]
    assert [a["operator"] for a in document["actions"]] == ["alice"]
    code, out, err = await paycore(capsys, "escalations", "show", "999999")
    assert (code, out) == (1, "") and "no escalation 999999" in err


async def test_attempts_show_prints_the_attempt_with_its_history_as_a_timeline(
    seeded: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    attempt: Attempt = seeded["attempt"]
    code, out, _ = await paycore(capsys, "attempts", "show", str(attempt.attempt_id))
    assert code == 0
    assert out.startswith(f"attempt {attempt.attempt_id}: Started (attempt 1 of order {attempt.order_id})")
    lines = out.splitlines()
    timeline = lines[lines.index("history (oldest first)") + 2:lines.index("notifications") - 1]
    assert [line.split()[3] for line in timeline] == ["transition", "send_intent", "transition"]
    assert attempt.idempotency_key in out and "request fields" in out and "(values not shown)" in out
    assert "tok_visa" not in out
    assert f"{seeded['dead']}" in out and "dead-lettered" in out and "broker down" in out

    code, out, _ = await paycore(capsys, "attempts", "show", str(attempt.attempt_id), "--json")
    document = json.loads(out)
    assert code == 0 and document["attempt"]["attempt_id"] == str(attempt.attempt_id)
    assert [e["kind"] for e in document["history"]] == ["transition", "send_intent", "transition"]
    assert [e["escalation_id"] for e in document["escalations"]] == [seeded["first"]]
    assert "tok_visa" not in out

    missing = uuid.uuid4()
    code, out, err = await paycore(capsys, "attempts", "show", str(missing))
    assert (code, out) == (1, "") and f"no attempt {missing}" in err
    code, _, err = await paycore(capsys, "attempts", "show", "not-a-uuid")
    assert code == 2 and "is not an attempt id" in err


async def test_notifications_unmatched_and_outbox_dead_letters(
    seeded: dict[str, Any], capsys: pytest.CaptureFixture[str], pool: asyncpg.Pool, clock: FakeClock
) -> None:
    code, out, _ = await paycore(capsys, "notifications", "unmatched")
    assert code == 0
    header, row = out.splitlines()
    assert header.split()[:2] == ["EVENT", "RECEIVED"] and row.split()[0] == str(seeded["event"])
    assert "pay_cli" in row and "whsec_1" not in out
    code, out, _ = await paycore(capsys, "notifications", "unmatched", "--json")
    assert [u["notification"]["event_id"] for u in json.loads(out)["items"]] == [seeded["event"]]

    code, out, _ = await paycore(capsys, "outbox", "dead-letters")
    assert code == 0
    header, row = out.splitlines()
    assert row.split()[:2] == [str(seeded["dead"]), "order-confirmation"] and row.endswith("broker down")
    code, out, _ = await paycore(capsys, "outbox", "dead-letters", "--kind", "refund-request", "--json")
    assert json.loads(out) == {"items": [], "next_cursor": None}
    await outbox_admin.skip(pool, seeded["dead"], operator="ops", reason="sent by hand",
                            now=clock.now() + timedelta(seconds=1))
    code, out, _ = await paycore(capsys, "outbox", "dead-letters")
    assert (code, out) == (0, "no dead-lettered outbox row\n")
