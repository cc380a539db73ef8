"""Cardco's settlements end to end (issue 30): the sandbox as a real HTTP server publishing a day's
batch, paycore's real Cardco reader over HTTP (``settlement_source``), the engine on a real
PostgreSQL, the command and recovery's daily task.

The money is made in the sandbox over its Cardco wire; the books here are rows carrying the ids
and references the sandbox issued (what recovery would have recorded). The sandbox's clock is
moved to noon of a day of its own (``next_noon``); paycore's is a FakeClock set from that day.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from harness.servers import serve_asgi
from paycore import settlement_runs
from paycore.accounts import register_provider_accounts
from paycore.clock import FakeClock
from paycore.config import ProviderAccountConfig, Settings, load_settings
from paycore.providers.settlement_sources import settlement_source
from paycore.settlements import AccountRun, exception_reason, reconcile_account
from paycore_cli.main import main
from paycore_recovery.settings import RecoverySettings
from paycore_recovery.settlement_task import SettlementTask, readable_sources
from paycore_sandbox.app import create_app
from paycore_sandbox.settings import SandboxSettings
from tests.matrix.helpers import attempt_values, insert_row, new_order, operation_values
from tests.sandbox.settlement_support import close, control, next_noon
from tests.sandbox.support import STORE_TEST_KEY, add_faults, paid, post

REMIND = dt.timedelta(minutes=15)
GRACE = dt.timedelta(days=3)
RECONCILED = "SELECT count(*) FROM outbox_messages WHERE kind = 'settlement-reconciled'"
TABLES = ("settlement_batches", "settlement_lines", "settlement_exceptions", "payment_escalations",
          "outbox_messages")
NOTHING = dict.fromkeys(TABLES, 0)


def sandbox_env(url: str) -> dict[str, str]:
    """The settings a shell pointing paycore at the sandbox's store account would export."""
    return {"PAYCORE_CARDCO_BASE_URL": url, "PAYCORE_CARDCO_ACCOUNT": "acct_store",
            "PAYCORE_CARDCO_ENVIRONMENT": "test", "PAYCORE_CARDCO_API_KEY": STORE_TEST_KEY}


@dataclass
class Books:
    """The sandbox (its URL and a client), paycore's database and clock, the account, the day."""

    url: str
    client: httpx.AsyncClient
    pool: asyncpg.Pool
    clock: FakeClock
    settings: Settings
    account: ProviderAccountConfig
    day: dt.date

    @property
    def noon(self) -> dt.datetime:
        return dt.datetime.combine(self.day, dt.time(12), dt.UTC)

    @property
    def target(self) -> dict[str, str]:
        return {"account": "acct_store", "date": self.day.isoformat()}

    async def payment(self, amount: int, *, state: str = "Succeeded", charged: int | None = None,
                      known_id: bool = True) -> tuple[asyncpg.Record, dict[str, Any]]:
        """A payment made in the sandbox (of ``charged``, by default ``amount``) and its attempt
        here for ``amount``, in ``state``, with the sandbox's id unless not ``known_id``."""
        order = await new_order(self.pool, self.clock, amount=amount)
        reference = f"{order.order_id}-a1"
        made = await paid(self.client, amount=charged or amount, reference=reference)
        assert made["status"] == "succeeded", made
        attempt = await insert_row(self.pool, "payment_attempts", attempt_values(
            order, self.account, self.noon, state=state, client_reference=reference,
            endpoint=self.account.payments_endpoint,
            provider_payment_id=made["id"] if known_id else None,
            provider_status="succeeded" if state == "Succeeded" else None))
        return attempt, made

    async def refund(self, attempt: asyncpg.Record, payment: dict[str, Any], amount: int, *,
                     state: str = "Succeeded") -> tuple[asyncpg.Record, dict[str, Any]]:
        """A refund made in the sandbox and its operation here, in ``state``."""
        values = operation_values(attempt, self.noon, state=state, amount_minor=amount)
        response = await post(self.client, "/v1/refunds", {
            "payment": payment["id"], "amount": amount, "reference": values["client_reference"]})
        assert response.status_code == 201, response.text
        made: dict[str, Any] = response.json()
        assert made["status"] == "succeeded", made
        operation = await insert_row(self.pool, "payment_operations", {
            **values, "provider_operation_id": made["id"]})
        return operation, made

    async def reconcile(self, *, at: dt.datetime | None = None) -> AccountRun:
        """The account's batches of the day through the real reader, as of ``at`` (paycore's clock)."""
        if at is not None:
            self.clock.current = at
        return await reconcile_account(
            self.pool, settlement_source(self.account), self.account.provider_account, self.day, self.day,
            now=self.clock.now(), grace=GRACE, reminder_interval=REMIND)

    async def counts(self) -> dict[str, int]:
        return {t: await self.pool.fetchval(f"SELECT count(*) FROM {t}") for t in TABLES}

    async def exceptions(self) -> list[tuple[str, int | None, str | None, str | None]]:
        """(kind, line, provider payment id, provider refund id) of every exception, by kind."""
        rows = await self.pool.fetch(
            "SELECT kind, line_no, detail->>'provider_payment_id' AS payment,"
            "       detail->>'provider_operation_id' AS refund"
            " FROM settlement_exceptions ORDER BY kind, line_no")
        return [(r["kind"], r["line_no"], r["payment"], r["refund"]) for r in rows]

    async def reasons(self) -> list[str]:
        rows = await self.pool.fetch("SELECT reason FROM payment_escalations ORDER BY reason")
        return [r["reason"] for r in rows]

    async def attempt_of(self, payment_id: str) -> uuid.UUID:
        attempt_id: uuid.UUID = await self.pool.fetchval(
            "SELECT attempt_id FROM payment_attempts WHERE provider_payment_id = $1", payment_id)
        return attempt_id


@pytest.fixture
async def sandbox_url() -> AsyncIterator[str]:
    async with serve_asgi(create_app(SandboxSettings.default())) as url:
        yield url


@pytest.fixture
async def books(sandbox_url: str, pool: asyncpg.Pool, clock: FakeClock) -> AsyncIterator[Books]:
    settings = load_settings(sandbox_env(sandbox_url))
    [account] = settings.accounts
    async with httpx.AsyncClient(base_url=sandbox_url, timeout=10) as client:
        day = await next_noon(client)
        clock.current = dt.datetime.combine(day, dt.time(12), dt.UTC)
        # registered as the command and the services register it, from the same settings
        await register_provider_accounts(pool, [account], clock.now())
        yield Books(sandbox_url, client, pool, clock, settings, account, day)


# ---------------------------------------------------------------------------------------------


async def test_a_closed_day_with_every_planted_exception_each_escalated_once(books: Books) -> None:
    ok, ok_payment = await books.payment(5000)
    ok_refund, _ = await books.refund(ok, ok_payment, 1000)
    _, wrong = await books.payment(3000, charged=3001)
    _, twice = await books.payment(2000)
    reversed_attempt, reversed_payment = await books.payment(4000)
    returned, returned_made = await books.refund(reversed_attempt, reversed_payment, 500, state="Returned")
    failed = await books.client.post(f"/_sandbox/refunds/{returned_made['id']}/fail", json={})
    assert failed.status_code == 200, failed.text
    unknown_here, unknown_made = await books.payment(1500, state="Unknown", known_id=False)
    suppressed, suppressed_made = await books.payment(2500)
    await control(books.client, "lines", {**books.target, "lines": [
        {"suppress": suppressed_made["id"]},
        {"duplicate": twice["id"]},
        {"type": "charge", "payment": "pay_not_ours", "reference": "X-1", "currency": "EUR",
         "gross": 777, "fee": 7},
        {"type": "refund", "payment": ok_payment["id"], "refund": "re_not_ours", "reference": "RX-1",
         "currency": "EUR", "gross": -700},
    ]})
    [closed] = await close(books.client, books.day, account="acct_store")
    assert closed["status"] == "paid"

    # inside the grace period: the batch, and nothing missing yet
    run = await books.reconcile(at=books.noon + dt.timedelta(days=1))
    assert run.unreadable == () and run.new_missing == 0
    [outcome] = run.outcomes
    assert (outcome.provider_batch_id, outcome.result) == (closed["id"], "recorded")
    # 11 lines: the charges of ok, wrong, twice (twice), reversed and unknown_here; the refunds of
    # ok and returned, returned's reversal; the planted charge and refund
    assert (outcome.line_count, outcome.matched_count, outcome.exception_count, outcome.bad_line_count,
            outcome.new_exceptions) == (11, 5, 6, 0, 6)
    found = await books.exceptions()
    assert [(kind, payment, refund) for kind, _, payment, refund in found] == [
        ("amount-mismatch", wrong["id"], None),
        ("duplicate-line", twice["id"], None),
        ("not-succeeded-here", unknown_made["id"], None),
        ("refund-reversed", reversed_payment["id"], returned_made["id"]),
        ("unknown-payment", "pay_not_ours", None),
        ("unknown-refund", ok_payment["id"], "re_not_ours"),
    ]
    assert all(line_no is not None for _, line_no, _, _ in found)
    # each escalation carries the evidence: the line as Cardco wrote it, and what is recorded here
    evidence = await books.pool.fetchval(
        "SELECT detail FROM payment_escalations WHERE reason = $1", exception_reason("amount-mismatch"))
    assert (evidence["provider_batch_id"], evidence["provider_payment_id"], evidence["gross_minor"]) == (
        closed["id"], wrong["id"], 3001)
    ours = evidence["ours"]
    assert (ours["attempt_state"], ours["attempt_amount_minor"]) == ("Succeeded", 3000)
    lines = await books.pool.fetch(
        "SELECT kind, outcome, attempt_id, operation_id FROM settlement_lines ORDER BY line_no")
    matched = {(r["kind"], r["attempt_id"], r["operation_id"]) for r in lines if r["outcome"] == "matched"}
    assert matched == {
        ("charge", ok["attempt_id"], None), ("refund", ok["attempt_id"], ok_refund["operation_id"]),
        ("charge", await books.attempt_of(twice["id"]), None),
        ("charge", reversed_attempt["attempt_id"], None),
        ("refund", reversed_attempt["attempt_id"], returned["operation_id"])}
    # the Unknown payment has no id here: its line found it by the merchant reference
    [not_here] = [r for r in lines if r["attempt_id"] == unknown_here["attempt_id"]]
    assert not_here["outcome"] == "exception"

    batch = await books.pool.fetchrow("SELECT * FROM settlement_batches")
    assert (batch["provider_batch_id"], batch["provider_status"], batch["state"], batch["line_count"],
            batch["matched_count"], batch["exception_count"]) == (
        closed["id"], "closed", "reconciled", 11, 5, 6)
    assert (batch["gross_minor"], batch["fees_minor"], batch["net_minor"]) == (
        closed["gross"], closed["fees"], closed["net"])
    effects = await books.pool.fetch(
        "SELECT payload FROM outbox_messages WHERE kind = 'settlement-reconciled'")
    assert len(effects) == 1 and effects[0]["payload"]["exception_count"] == 6

    # past the grace period: the suppressed payment is missing, found once
    run = await books.reconcile(at=books.noon + GRACE + dt.timedelta(days=1))
    assert [o.result for o in run.outcomes] == ["unchanged"] and run.new_missing == 1
    missing = await books.pool.fetchrow(
        "SELECT attempt_id, line_no, batch_id FROM settlement_exceptions WHERE kind = 'missing-payment'")
    assert (missing["attempt_id"], missing["line_no"], missing["batch_id"]) == (
        suppressed["attempt_id"], None, None)
    kinds = ["amount-mismatch", "duplicate-line", "missing-payment", "not-succeeded-here", "refund-reversed",
             "unknown-payment", "unknown-refund"]
    assert await books.reasons() == [exception_reason(k) for k in kinds]
    assert exception_reason("missing-payment") == "settlement-exception:missing-payment"
    assert await books.pool.fetchval(
        "SELECT count(*) FROM settlement_exceptions WHERE escalation_id IS NULL") == 0
    assert await books.pool.fetchval(RECONCILED) == 1  # an unchanged batch queues nothing


async def test_unreadable_rows_make_the_batch_unbalanced_with_each_row_an_exception(books: Books) -> None:
    await books.payment(5000)
    unknown_type = f"ln_bad1,mystery,,,,,{books.day.isoformat()}T12:30:00Z,EUR,100,0,100\n"
    await control(books.client, "raw", {**books.target, "csv_suffix": unknown_type})
    not_utf8 = f"ln_bad2,charge,pay_x,,,R\xff,{books.day.isoformat()}T12:31:00Z,EUR,5,0,5\n".encode("latin-1")
    await control(books.client, "raw", {**books.target,
                                        "csv_suffix_b64": base64.b64encode(not_utf8).decode()})
    [closed] = await close(books.client, books.day, account="acct_store")

    [outcome] = (await books.reconcile()).outcomes
    assert (outcome.result, outcome.line_count, outcome.matched_count, outcome.bad_line_count) == (
        "unbalanced", 1, 0, 2)
    assert await books.exceptions() == [
        ("malformed-line", 2, None, None), ("malformed-line", 3, None, None),
        ("unbalanced-batch", None, None, None)]
    details = {r["line_no"]: r["detail"] for r in await books.pool.fetch(
        "SELECT line_no, detail FROM settlement_exceptions")}
    assert "mystery" in details[2]["reason"] and details[2]["raw"]["line_id"] == "ln_bad1"
    assert "not UTF-8" in details[3]["reason"] and "ln_bad2" in details[3]["raw"]["row"]
    assert details[None]["differences"]["lines"] == {"reported": closed["lines"], "counted": 3}
    # nothing else: no line kept, the good charge matched to nothing
    assert await books.pool.fetchval("SELECT count(*) FROM settlement_lines") == 0
    assert await books.pool.fetchval("SELECT state FROM settlement_batches") == "unbalanced"
    assert await books.reasons() == [exception_reason("malformed-line")] * 2 + [
        exception_reason("unbalanced-batch")]
    assert await books.pool.fetchval(RECONCILED) == 1


async def test_totals_that_are_not_the_lines_sums_make_an_unbalanced_batch(books: Books) -> None:
    await books.payment(5000)
    await control(books.client, "totals", {**books.target, "gross": 4999})
    [closed] = await close(books.client, books.day, account="acct_store")
    assert closed["gross"] == 4999
    [outcome] = (await books.reconcile()).outcomes
    assert (outcome.result, outcome.line_count, outcome.bad_line_count) == ("unbalanced", 1, 0)
    assert await books.exceptions() == [("unbalanced-batch", None, None, None)]
    detail = await books.pool.fetchval("SELECT detail FROM settlement_exceptions")
    assert detail["differences"] == {"gross_minor": {"reported": 4999, "counted": 5000}}
    assert await books.pool.fetchval("SELECT count(*) FROM settlement_lines") == 0
    assert await books.reasons() == [exception_reason("unbalanced-batch")]


async def test_the_same_range_twice_records_nothing_the_second_time(books: Books) -> None:
    await books.payment(5000)
    _, suppressed = await books.payment(2500)
    await control(books.client, "lines", {**books.target, "lines": [
        {"suppress": suppressed["id"]},
        {"type": "charge", "payment": "pay_not_ours", "currency": "EUR", "gross": 777, "fee": 7}]})
    await close(books.client, books.day, account="acct_store")
    late = books.noon + GRACE + dt.timedelta(days=1)
    first = await books.reconcile(at=late)
    assert [o.result for o in first.outcomes] == ["recorded"] and first.new_missing == 1
    counts = await books.counts()
    # each escalation alerts through the outbox, beside the batch's one settlement-reconciled
    assert counts == {"settlement_batches": 1, "settlement_lines": 2, "settlement_exceptions": 2,
                      "payment_escalations": 2, "outbox_messages": 3}
    assert await books.pool.fetchval(RECONCILED) == 1
    again = await books.reconcile(at=late + dt.timedelta(hours=1))
    assert [(o.result, o.batch_id) for o in again.outcomes] == [("unchanged", first.outcomes[0].batch_id)]
    assert again.new_missing == 0
    assert await books.counts() == counts


async def test_a_batch_whose_lines_cannot_be_fetched_is_unreadable_and_read_next_time(books: Books) -> None:
    await books.payment(5000)
    [closed] = await close(books.client, books.day, account="acct_store")
    path = f"/v1/settlements/{closed['id']}/lines"
    await add_faults(books.client, {"fault": "not_processed_503", "match": {"reference": path}})
    for _ in range(2):  # as long as the provider fails, every run says so and records nothing
        run = await books.reconcile()
        assert (run.outcomes, run.new_missing) == ((), 0)
        [(batch_id, why)] = run.unreadable
        assert batch_id == closed["id"] and "HTTP 503" in why
        assert await books.counts() == NOTHING
    [rule] = (await books.client.get("/_sandbox/faults")).json()["rules"]
    assert rule["fired"] == 2  # the lines' GET failed; the list's did not match

    assert (await books.client.delete("/_sandbox/faults")).status_code == 200
    run = await books.reconcile()
    assert run.unreadable == ()
    assert [(o.result, o.line_count, o.matched_count) for o in run.outcomes] == [("recorded", 1, 1)]


async def test_an_open_batch_is_read_again_as_it_fills_and_once_more_when_paid(books: Books) -> None:
    await books.payment(5000)
    first = await books.reconcile()
    assert [(o.result, o.line_count, o.matched_count) for o in first.outcomes] == [("recorded", 1, 1)]
    assert await books.pool.fetchval("SELECT provider_status FROM settlement_batches") == "open"
    assert [o.result for o in (await books.reconcile()).outcomes] == ["unchanged"]  # nothing new in it

    await books.payment(2000)  # the same day, the batch still open
    grown = await books.reconcile()
    assert [(o.result, o.line_count, o.matched_count, o.batch_id) for o in grown.outcomes] == [
        ("recorded", 2, 2, first.outcomes[0].batch_id)]
    [closed] = await close(books.client, books.day, account="acct_store")
    paid_out = await books.reconcile()
    assert [(o.result, o.line_count, o.matched_count) for o in paid_out.outcomes] == [("recorded", 2, 2)]
    batch = await books.pool.fetchrow("SELECT * FROM settlement_batches")
    assert (batch["provider_status"], batch["line_count"], batch["net_minor"]) == ("closed", 2, closed["net"])
    assert [o.result for o in (await books.reconcile()).outcomes] == ["unchanged"]
    assert await books.pool.fetchval("SELECT count(*) FROM settlement_lines") == 2
    # one settlement-reconciled per reading: first, grown, and paid -- the closing too, though its
    # lines are those of the last open reading, so the accounting systems' last record says closed
    effects = await books.pool.fetch("SELECT payload FROM outbox_messages"
                                     " WHERE kind = 'settlement-reconciled' ORDER BY message_id")
    assert [(e["payload"]["provider_status"], e["payload"]["line_count"]) for e in effects] == [
        ("open", 1), ("open", 2), ("closed", 2)]
    assert await books.pool.fetchval("SELECT count(*) FROM settlement_exceptions") == 0


# --- the command --------------------------------------------------------------------------------


@pytest.fixture
def shell(books: Books, db_dsn: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Books]:
    """The environment a shell running ``paycore`` against the sandbox would have."""
    for name in list(os.environ):
        if name.startswith("PAYCORE_"):
            monkeypatch.delenv(name)
    for name, value in {"PAYCORE_DATABASE_URL": db_dsn, **sandbox_env(books.url)}.items():
        monkeypatch.setenv(name, value)
    yield books


async def paycore(*argv: str) -> int:
    """``main`` in a thread: it runs its own event loop, beside the sandbox's server."""
    return await asyncio.to_thread(main, list(argv))


async def test_the_command_reconciles_a_range_and_prints_json(
        shell: Books, capsys: pytest.CaptureFixture[str]) -> None:
    await shell.payment(5000)
    await control(shell.client, "lines", {**shell.target, "lines": [
        {"type": "charge", "payment": "pay_not_ours", "currency": "EUR", "gross": 777, "fee": 7}]})
    [closed] = await close(shell.client, shell.day, account="acct_store")
    account = shell.account.provider_account
    day = shell.day.isoformat()
    argv = ("reconcile", "settlements", "--account", account, "--from", day, "--to", day, "--json")
    assert await paycore(*argv) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["failures"] == []
    [run] = printed["accounts"]
    assert (run["provider_account"], run["unreadable"]) == (account, [])
    [batch] = run["batches"]
    assert {k: batch[k] for k in ("provider_batch_id", "result", "lines", "matched", "exceptions",
                                  "new_exceptions", "bad_lines")} == {
        "provider_batch_id": closed["id"], "result": "recorded", "lines": 2, "matched": 1, "exceptions": 1,
        "new_exceptions": 1, "bad_lines": 0}
    assert await shell.reasons() == [exception_reason("unknown-payment")]

    assert await paycore(*argv) == 0  # again: the closed batch is not read again
    [batch] = json.loads(capsys.readouterr().out)["accounts"][0]["batches"]
    assert batch["result"] == "unchanged"
    assert await shell.pool.fetchval("SELECT count(*) FROM settlement_exceptions") == 1


async def test_the_command_exits_1_when_a_batch_cannot_be_read_and_records_nothing(
        shell: Books, capsys: pytest.CaptureFixture[str]) -> None:
    await shell.payment(5000)
    [closed] = await close(shell.client, shell.day, account="acct_store")
    await add_faults(shell.client, {"fault": "not_processed_503",
                                    "match": {"reference": f"/v1/settlements/{closed['id']}/lines"}})
    day = shell.day.isoformat()
    argv = ("reconcile", "settlements", "--account", shell.account.provider_account, "--from", day,
            "--to", day, "--json")
    assert await paycore(*argv) == 1
    [run] = json.loads(capsys.readouterr().out)["accounts"]
    assert run["batches"] == []
    [unreadable] = run["unreadable"]
    assert unreadable["provider_batch_id"] == closed["id"] and "HTTP 503" in unreadable["error"]
    assert await shell.counts() == NOTHING
    assert (await shell.client.delete("/_sandbox/faults")).status_code == 200
    assert await paycore(*argv) == 0  # run it again: now it is read
    [batch] = json.loads(capsys.readouterr().out)["accounts"][0]["batches"]
    assert (batch["result"], batch["matched"]) == ("recorded", 1)


async def test_the_command_refuses_a_file_without_an_account(
        shell: Books, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    report = tmp_path / "lines.csv"
    report.write_text("line_id,type,payment,refund,capture,reference,created,currency,gross,fee,net\n")
    assert await paycore("reconcile", "settlements", "--file", str(report)) == 2
    assert "--file needs exactly one --account" in capsys.readouterr().err
    assert await shell.counts() == NOTHING


# --- recovery's daily task ----------------------------------------------------------------------


async def test_the_daily_task_waits_for_its_time_then_two_instances_reconcile_once(books: Books) -> None:
    await books.payment(5000)
    await close(books.client, books.day, account="acct_store")
    recovery = RecoverySettings(settlement_run_at=dt.time(6, 0))
    sources = readable_sources(books.settings)
    tasks = [SettlementTask(pool=books.pool, clock=books.clock, settings=books.settings, recovery=recovery,
                            sources=sources, owner=owner) for owner in ("recovery-a", "recovery-b")]
    next_day = books.day + dt.timedelta(days=1)
    books.clock.current = dt.datetime.combine(next_day, dt.time(5, 59), dt.UTC)
    assert [await t.run_due() for t in tasks] == [[], []]
    assert await books.counts() == NOTHING
    assert await settlement_runs.last_finished(books.pool) == {}

    books.clock.current = dt.datetime.combine(next_day, dt.time(6, 0), dt.UTC)
    runs = await asyncio.gather(*(t.run_due() for t in tasks))
    [run] = [run for instance in runs for run in instance]
    assert run.provider_account == books.account.provider_account
    assert [(o.result, o.line_count, o.matched_count) for o in run.outcomes] == [("recorded", 1, 1)]
    finished = await settlement_runs.last_finished(books.pool)
    assert finished == {books.account.provider_account: books.clock.now()}
    assert [await t.run_due() for t in tasks] == [[], []]  # the day's run is done
    assert await books.counts() == {**NOTHING, "settlement_batches": 1, "settlement_lines": 1,
                                    "outbox_messages": 1}
