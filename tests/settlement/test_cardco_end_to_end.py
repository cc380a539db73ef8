"""Cardco settlement reconciliation end to end (issue 30): real PostgreSQL, the sandbox as a real
HTTP server, payments made through checkout and refunds through paycore's operation sender (so
the books carry the ids the sandbox really issued), the sandbox's settlement book planted with
every kind of discrepancy, and paycore's real Cardco reader over HTTP (no mock, no sleep: the
sandbox's clock is moved through ``/_sandbox/clock``, paycore's is a FakeClock kept on it).
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from paycore.clock import FakeClock
from paycore.providers.settlement_sources import settlement_source
from paycore.settlement_lines import BadLine, LineKind, SettlementBatch, SettlementLine, SettlementSourceError
from paycore.settlements import exception_reason
from paycore_recovery.settings import RecoverySettings
from paycore_recovery.settlement_task import SettlementTask, readable_sources
from tests.sandbox.settlement_support import control, fee, rows_of
from tests.sandbox.support import auth, post
from tests.support.cli import paycore
from tests.support.stack import Stack

from .cardco_support import (
    ACCOUNT,
    GRACE,
    account_of,
    batch_id_of,
    batch_row,
    close,
    exceptions,
    next_day,
    pay,
    plant,
    reconcile,
    reconciled_messages,
    refund,
    settlement_day,
)
from .row_counts import counts, more_exceptions


def by_kind(found: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    kinds: dict[str, list[dict[str, Any]]] = {}
    for e in found:
        kinds.setdefault(e["kind"], []).append(e)
    return kinds


def assert_escalated(found: list[dict[str, Any]]) -> None:
    """Each exception has its own open escalation, reason ``settlement-exception:<kind>``, whose
    detail is the exception's evidence."""
    assert len({e["escalation_id"] for e in found}) == len(found)
    for e in found:
        assert e["escalation_id"] is not None, e
        assert e["reason"] == exception_reason(e["kind"]) == f"settlement-exception:{e['kind']}"
        assert e["escalation_detail"] == e["detail"] and e["resolved_at"] is None


# ---------------------------------------------------------------------------
# 1. Every kind of exception


async def test_every_kind_of_exception_in_one_closed_day_then_missing_after_the_grace(stack: Stack) -> None:
    sandbox = stack.sandbox.http
    day = await settlement_day(stack)
    matched = await pay(stack, 5000)
    matched_refund = await refund(stack, matched, 1000)
    # a refund made in Cardco's dashboard: paycore never heard of it
    dashboard = await post(sandbox, "/v1/refunds", {"payment": matched.provider_payment_id, "amount": 300,
                                                    "reference": "DASHBOARD-1"})
    assert dashboard.status_code == 201, dashboard.text
    wrong_amount = await pay(stack, 3000)
    in_dollars = await pay(stack, 2000, currency="USD")
    twice = await pay(stack, 2000)
    reversed_payment = await pay(stack, 4000)
    reversed_refund = await refund(stack, reversed_payment, 1500)
    failed = await sandbox.post(f"/_sandbox/refunds/{reversed_refund.provider_operation_id}/fail", json={})
    assert failed.status_code == 200, failed.text
    suppressed = await pay(stack, 2500)
    refunded_here = await pay(stack, 3500)
    suppressed_refund = await refund(stack, refunded_here, 800)
    # a payment whose answer paycore could not read: Succeeded at Cardco, Unknown here
    await stack.sandbox.fault("malformed_body", match={"any": True, "operation": "create"}, times=1)
    unknown_order = await stack.shop.create_order(amount_minor=4200)
    unknown = await stack.shop.pay(unknown_order)
    assert unknown.json()["state"] == "Unknown", unknown.text
    unknown_attempt = await stack.pool.fetchrow(
        "SELECT attempt_id, client_reference, provider_payment_id FROM payment_attempts WHERE order_id = $1",
        unknown_order)
    assert unknown_attempt["provider_payment_id"] is None  # its line is found by the reference paycore sent
    await plant(stack, day,
                {"type": "charge", "payment": "pay_notours", "reference": "ELSEWHERE-1", "currency": "EUR",
                 "gross": 1234, "fee": fee(1234)},
                {"suppress": wrong_amount.provider_payment_id},
                {"type": "charge", "payment": wrong_amount.provider_payment_id,
                 "reference": wrong_amount.reference, "currency": "EUR", "gross": 3100, "fee": fee(3100)},
                # charged in dollars here, settled as euros there
                {"suppress": in_dollars.provider_payment_id},
                {"type": "charge", "payment": in_dollars.provider_payment_id,
                 "reference": in_dollars.reference, "currency": "EUR", "gross": 2000, "fee": fee(2000)},
                {"duplicate": twice.provider_payment_id},
                {"suppress": suppressed.provider_payment_id},
                {"suppress": suppressed_refund.provider_operation_id})
    closed = await close(stack, day)

    run = await reconcile(stack, day)
    assert run.unreadable == () and run.new_missing == 0  # the grace period has not passed
    [outcome] = run.outcomes
    batch = await batch_row(stack.pool, batch_id_of(day))
    assert (outcome.provider_batch_id, outcome.result, outcome.batch_id) == (
        batch_id_of(day), "recorded", batch["batch_id"])
    # charge + refund of `matched`, `twice`'s first charge, `reversed_payment`'s charge and refund,
    # `refunded_here`'s charge
    assert (outcome.line_count, outcome.matched_count, outcome.exception_count, outcome.bad_line_count,
            outcome.new_exceptions) == (13, 6, 7, 0, 7) == (
        closed["lines"], batch["matched_count"], batch["exception_count"], batch["bad_line_count"], 7)
    assert (batch["state"], batch["provider_status"], batch["source"], batch["currency"]) == (
        "reconciled", "closed", "api", "EUR")
    assert (batch["gross_minor"], batch["fees_minor"], batch["net_minor"]) == (
        closed["gross"], closed["fees"], closed["net"])

    found = await exceptions(stack.pool)
    kinds = by_kind(found)
    assert sorted(kinds) == ["amount-mismatch", "currency-mismatch", "duplicate-line", "not-succeeded-here",
                             "refund-reversed", "unknown-payment", "unknown-refund"], found
    assert all(len(v) == 1 for v in kinds.values()), found
    assert_escalated(found)
    lines = {r["line_no"]: dict(r) for r in await stack.pool.fetch(
        "SELECT * FROM settlement_lines WHERE batch_id = $1", batch["batch_id"])}
    assert len(lines) == 13
    # Cardco's lines CSV has no exchange rate (docs/providers/cardco.md): none is stored.
    assert {r["exchange_rate"] for r in lines.values()} == {None}
    matched_lines = {(r["kind"], r["attempt_id"], r["operation_id"]) for r in lines.values()
                     if r["outcome"] == "matched"}
    assert matched_lines == {
        ("charge", matched.attempt_id, None), ("refund", matched.attempt_id, matched_refund.operation_id),
        ("charge", twice.attempt_id, None), ("charge", reversed_payment.attempt_id, None),
        ("refund", reversed_payment.attempt_id, reversed_refund.operation_id),
        ("charge", refunded_here.attempt_id, None)}
    for e in found:  # each names its line, and the line names it
        assert lines[e["line_no"]]["exception_kind"] == e["kind"] and e["detail"]["line_no"] == e["line_no"]
        assert e["detail"]["provider_batch_id"] == batch_id_of(day)

    [foreign] = kinds["unknown-payment"]
    assert (foreign["attempt_id"], foreign["detail"]["provider_payment_id"], foreign["detail"]["reference"],
            foreign["detail"]["gross_minor"], foreign["detail"]["ours"]) == (
        None, "pay_notours", "ELSEWHERE-1", 1234, {})
    [dash] = kinds["unknown-refund"]
    assert (dash["operation_id"], dash["detail"]["provider_operation_id"], dash["detail"]["gross_minor"],
            dash["detail"]["reference"]) == (None, dashboard.json()["id"], -300, "DASHBOARD-1")
    [amount] = kinds["amount-mismatch"]
    assert (amount["attempt_id"], amount["detail"]["gross_minor"],
            amount["detail"]["ours"]["attempt_amount_minor"]) == (wrong_amount.attempt_id, 3100, 3000)
    [currency] = kinds["currency-mismatch"]
    assert (currency["attempt_id"], currency["detail"]["gross_currency"],
            currency["detail"]["ours"]["attempt_currency"]) == (in_dollars.attempt_id, "EUR", "USD")
    [dup] = kinds["duplicate-line"]
    assert (dup["attempt_id"], dup["detail"]["provider_line_id"]) == (
        twice.attempt_id, f"ln_{twice.provider_payment_id}_dup1")
    [back] = kinds["refund-reversed"]
    assert (back["operation_id"], back["detail"]["line_kind"], back["detail"]["gross_minor"],
            back["detail"]["ours"]["operation_state"]) == (
        reversed_refund.operation_id, "refund_reversal", 1500, "Succeeded")
    [not_here] = kinds["not-succeeded-here"]
    assert (not_here["attempt_id"], not_here["detail"]["reference"],
            not_here["detail"]["ours"]["attempt_state"]) == (
        unknown_attempt["attempt_id"], unknown_attempt["client_reference"], "Unknown")

    [message] = await reconciled_messages(stack.pool)
    assert {k: message[k] for k in ("batch_id", "provider_account", "provider_batch_id", "batch_date",
                                    "provider_status", "state", "line_count", "matched_count",
                                    "exception_count", "bad_line_count", "gross_minor")} == {
        "batch_id": batch["batch_id"], "provider_account": ACCOUNT, "provider_batch_id": batch_id_of(day),
        "batch_date": day.isoformat(), "provider_status": "closed", "state": "reconciled", "line_count": 13,
        "matched_count": 6, "exception_count": 7, "bad_line_count": 0, "gross_minor": closed["gross"]}

    # Past the grace period: the suppressed payment and refund are missing from Cardco's books, and
    # only they.
    later = dt.datetime.combine(day, dt.time(12), dt.UTC) + GRACE + dt.timedelta(days=1)
    before = await counts(stack.pool)
    again = await reconcile(stack, day, now=later)
    assert [o.result for o in again.outcomes] == ["unchanged"] and again.new_missing == 2
    kinds = by_kind(await exceptions(stack.pool))
    [missing] = kinds["missing-payment"]
    assert (missing["attempt_id"], missing["batch_id"], missing["detail"]["provider_payment_id"],
            missing["detail"]["amount_minor"], missing["detail"]["order_id"]) == (
        suppressed.attempt_id, None, suppressed.provider_payment_id, 2500, suppressed.order_id)
    [missing_refund] = kinds["missing-refund"]
    assert (missing_refund["attempt_id"], missing_refund["operation_id"], missing_refund["batch_id"],
            missing_refund["line_no"]) == (
        refunded_here.attempt_id, suppressed_refund.operation_id, None, None)
    assert {k: missing_refund["detail"][k] for k in (
        "operation_kind", "provider_operation_id", "reference", "amount_minor", "currency")} == {
        "operation_kind": "refund", "provider_operation_id": suppressed_refund.provider_operation_id,
        "reference": suppressed_refund.client_reference, "amount_minor": 800, "currency": "EUR"}
    assert_escalated(await exceptions(stack.pool))
    # each its row, its escalation and the escalation's alert; nothing of the batch again
    assert await counts(stack.pool) == more_exceptions(before, 2)
    assert (await reconcile(stack, day, now=later)).new_missing == 0  # found again: nothing new


async def test_unreadable_rows_are_malformed_lines_with_their_numbers_and_unbalance_the_batch(
        stack: Stack) -> None:
    """A row Cardco's reader cannot take -- not UTF-8, a bad number, an unknown type, a row in
    another currency than the batch's -- is one ``malformed-line`` exception with its row number,
    escalated. Its money counts in no sum, so a batch with one does not add up to the totals it
    reports: it is ``unbalanced``, none of its lines recorded."""
    day = await settlement_day(stack)
    kept = await pay(stack, 5000)
    await plant(stack, day, {"type": "charge", "payment": kept.provider_payment_id,
                             "reference": kept.reference, "currency": "USD", "gross": 5000, "fee": fee(5000)})
    target = {"account": "acct_store", "date": day.isoformat()}
    await control(stack.sandbox.http, "raw", {**target, "csv_suffix_b64": base64.b64encode(
        b"ln_x1,charge,pay_x,,,ORD-\xff,2026-12-03T10:00:00Z,EUR,100,26,74\n").decode()})
    await control(stack.sandbox.http, "raw", {**target, "csv_suffix": (
        "ln_x2,charge,pay_y,,,ORD-Y,2026-12-03T10:00:00Z,EUR,1.5,0,1.5\n"
        "ln_x3,mystery,,,,,2026-12-03T10:00:00Z,EUR,1,0,1\n")})
    await close(stack, day)

    [outcome] = (await reconcile(stack, day)).outcomes
    assert (outcome.result, outcome.line_count, outcome.matched_count, outcome.bad_line_count) == (
        "unbalanced", 1, 0, 4)
    batch = await batch_row(stack.pool, batch_id_of(day))
    assert (batch["state"], batch["bad_line_count"], batch["exception_count"]) == ("unbalanced", 4, 5)
    assert await stack.pool.fetchval("SELECT count(*) FROM settlement_lines") == 0
    found = await exceptions(stack.pool)
    assert_escalated(found)
    [unbalanced] = by_kind(found)["unbalanced-batch"]
    assert unbalanced["detail"]["differences"]["lines"] == {"reported": 2, "counted": 5}
    bad = {e["line_no"]: e["detail"] for e in by_kind(found)["malformed-line"]}
    assert sorted(bad) == [2, 3, 4, 5]
    assert bad[2]["reason"] == "currency USD is not the batch's EUR"
    assert bad[2]["raw"]["payment"] == kept.provider_payment_id
    assert bad[3]["reason"].startswith("not UTF-8") and "ORD-\ufffd" in bad[3]["raw"]["row"]
    assert bad[4]["reason"].startswith("gross is not an integer amount")
    assert bad[5]["reason"] == "unknown line type 'mystery'"
    assert all(d["provider_batch_id"] == batch_id_of(day) and d["line_no"] == n for n, d in bad.items())
    [message] = await reconciled_messages(stack.pool)
    assert (message["state"], message["bad_line_count"], message["exception_count"]) == ("unbalanced", 4, 5)


# ---------------------------------------------------------------------------
# 2. Unbalanced


async def test_totals_that_do_not_add_up_make_the_batch_unbalanced_with_no_lines(stack: Stack) -> None:
    day = await settlement_day(stack)
    first = await pay(stack, 5000)
    await refund(stack, first, 500)
    await control(stack.sandbox.http, "totals", {"account": "acct_store", "date": day.isoformat(),
                                                 "gross": 1, "net": 2})
    closed = await close(stack, day)

    [outcome] = (await reconcile(stack, day)).outcomes
    assert (outcome.result, outcome.line_count, outcome.matched_count, outcome.exception_count) == (
        "unbalanced", 2, 0, 1)
    batch = await batch_row(stack.pool, batch_id_of(day))
    assert (batch["state"], batch["reported_gross_minor"], batch["gross_minor"]) == ("unbalanced", 1, 4500)
    assert await stack.pool.fetchval("SELECT count(*) FROM settlement_lines") == 0
    [only] = await exceptions(stack.pool)
    assert only["kind"] == "unbalanced-batch" and only["line_no"] is None
    assert only["detail"]["differences"] == {
        "gross_minor": {"reported": 1, "counted": 4500},
        "net_minor": {"reported": 2, "counted": 4500 - closed["fees"]}}
    assert_escalated([only])
    [message] = await reconciled_messages(stack.pool)
    assert (message["state"], message["line_count"], message["exception_count"]) == ("unbalanced", 2, 1)
    before = await counts(stack.pool)
    assert [o.result for o in (await reconcile(stack, day)).outcomes] == ["unchanged"]
    assert await counts(stack.pool) == before


# ---------------------------------------------------------------------------
# 3. Idempotent


async def test_the_same_range_twice_records_nothing_the_second_time(stack: Stack) -> None:
    day = await settlement_day(stack)
    first = await pay(stack, 5000)
    await refund(stack, first, 700)
    await pay(stack, 1200)
    await plant(stack, day, {"type": "charge", "payment": "pay_notours", "currency": "EUR", "gross": 999})
    await close(stack, day)
    later = dt.datetime.combine(day, dt.time(12), dt.UTC) + GRACE + dt.timedelta(days=1)
    run = await reconcile(stack, day, now=later)
    assert [(o.result, o.line_count, o.matched_count, o.new_exceptions) for o in run.outcomes] == [
        ("recorded", 4, 3, 1)]
    before = await counts(stack.pool)
    assert before == {"settlement_batches": 1, "settlement_lines": 4, "settlement_exceptions": 1,
                      "payment_escalations": 1, "outbox_messages": before["outbox_messages"]}
    again = await reconcile(stack, day, now=later + dt.timedelta(hours=1))
    assert [(o.result, o.new_exceptions) for o in again.outcomes] == [("unchanged", 0)]
    assert again.new_missing == 0
    assert await counts(stack.pool) == before


async def test_an_open_batch_read_again_records_its_new_lines_and_no_exception_twice(stack: Stack) -> None:
    day = await settlement_day(stack)
    first = await pay(stack, 5000)
    await plant(stack, day, {"type": "charge", "payment": "pay_notours", "currency": "EUR", "gross": 999})
    [opened] = (await reconcile(stack, day)).outcomes
    assert (opened.result, opened.line_count, opened.matched_count, opened.new_exceptions) == (
        "recorded", 2, 1, 1)
    assert (await batch_row(stack.pool, batch_id_of(day)))["provider_status"] == "open"
    same = await counts(stack.pool)
    [unchanged] = (await reconcile(stack, day)).outcomes  # open, and nothing new in it
    assert unchanged.result == "unchanged" and await counts(stack.pool) == same

    # More money moves on the day, then Cardco closes it.
    second = await pay(stack, 1500)
    rf = await refund(stack, first, 400)
    await close(stack, day)
    [final] = (await reconcile(stack, day)).outcomes
    assert (final.result, final.batch_id, final.line_count, final.matched_count, final.exception_count,
            final.new_exceptions) == ("recorded", opened.batch_id, 4, 3, 1, 0)
    batch = await batch_row(stack.pool, batch_id_of(day))
    assert (batch["provider_status"], batch["line_count"]) == ("closed", 4)
    rows = await stack.pool.fetch("SELECT line_no, outcome, attempt_id, operation_id FROM settlement_lines "
                                  "ORDER BY line_no")
    assert [(r["outcome"], r["attempt_id"], r["operation_id"]) for r in rows] == [
        ("matched", first.attempt_id, None), ("exception", None, None),
        ("matched", second.attempt_id, None), ("matched", first.attempt_id, rf.operation_id)]
    found = await exceptions(stack.pool)
    assert [e["kind"] for e in found] == ["unknown-payment"]  # found three times, recorded once
    assert await stack.pool.fetchval("SELECT count(*) FROM payment_escalations") == 1
    assert [(m["provider_status"], m["line_count"]) for m in await reconciled_messages(stack.pool)] == [
        ("open", 2), ("closed", 4)]
    assert [o.result for o in (await reconcile(stack, day)).outcomes] == ["unchanged"]


# ---------------------------------------------------------------------------
# 4. Provider trouble


async def test_a_batch_whose_lines_fail_is_unreadable_then_read_on_the_next_run(stack: Stack) -> None:
    day = await settlement_day(stack)
    await pay(stack, 5000)
    await close(stack, day)
    second_day = await next_day(stack, day)
    await pay(stack, 2000)
    await close(stack, second_day)
    path = f"/v1/settlements/{batch_id_of(day)}/lines"
    await stack.sandbox.fault("not_processed_503", match={"reference": path}, times=1)

    run = await reconcile(stack, day, second_day)
    assert [(o.provider_batch_id, o.result) for o in run.outcomes] == [(batch_id_of(second_day), "recorded")]
    [(unread, why)] = run.unreadable
    assert unread == batch_id_of(day) and "HTTP 503" in why and batch_id_of(day) in why
    assert await stack.pool.fetchval("SELECT count(*) FROM settlement_batches WHERE provider_batch_id = $1",
                                     batch_id_of(day)) == 0

    retried = await reconcile(stack, day, second_day)  # the fault is used up
    assert [(o.provider_batch_id, o.result) for o in retried.outcomes] == [
        (batch_id_of(day), "recorded"), (batch_id_of(second_day), "unchanged")]
    assert retried.unreadable == ()
    assert await stack.pool.fetchval("SELECT count(*) FROM settlement_lines") == 2


async def test_a_lines_body_cut_short_records_nothing_of_the_batch(stack: Stack) -> None:
    day = await settlement_day(stack)
    for amount in range(1000, 1020):
        await pay(stack, amount)
    await close(stack, day)
    path = f"/v1/settlements/{batch_id_of(day)}/lines"
    await stack.sandbox.fault("malformed_body", match={"reference": path}, times=1)

    before = await counts(stack.pool)
    run = await reconcile(stack, day)
    [(unread, why)] = run.unreadable
    assert run.outcomes == () and unread == batch_id_of(day)
    assert "cut short" in why and "of the batch's 20 rows" in why, why
    assert await counts(stack.pool) == before  # not recorded, not even as unbalanced
    [outcome] = (await reconcile(stack, day)).outcomes
    assert (outcome.result, outcome.line_count, outcome.matched_count) == ("recorded", 20, 20)


async def test_another_accounts_key_refused_is_a_source_error(stack: Stack) -> None:
    day = await settlement_day(stack)
    await pay(stack, 5000)
    await close(stack, day)
    wrong = dataclasses.replace(account_of(stack), api_key=type(account_of(stack).api_key)(
        "sk_test_acct_other_local"))
    with pytest.raises(SettlementSourceError, match=r"HTTP 40[13], the account's API key was refused"):
        await settlement_source(wrong).batches(ACCOUNT, day, day)
    assert await stack.pool.fetchval("SELECT count(*) FROM settlement_batches") == 0


# ---------------------------------------------------------------------------
# The reader over HTTP


async def test_the_reader_lists_the_accounts_batches_and_streams_their_lines(stack: Stack) -> None:
    day = await settlement_day(stack)
    sale = await pay(stack, 5000)
    rf = await refund(stack, sale, 1200)
    await close(stack, day)
    second_day = await next_day(stack, day)
    await pay(stack, 700)
    source = settlement_source(account_of(stack))

    first, second = await source.batches(ACCOUNT, day, second_day)
    assert first == SettlementBatch(
        provider_account=ACCOUNT, provider_batch_id=batch_id_of(day), batch_date=day, status="closed",
        currency="EUR", reported_gross_minor=3800, reported_fees_minor=fee(5000),
        reported_net_minor=3800 - fee(5000), reported_lines=2, source="api")
    assert (second.provider_batch_id, second.status, second.reported_lines) == (
        batch_id_of(second_day), "open", 1)
    assert await source.batches(ACCOUNT, day - dt.timedelta(days=3), day - dt.timedelta(days=1)) == []

    lines = [line async for line in source.lines(first)]
    assert all(isinstance(line, SettlementLine) for line in lines)
    charge, refund_line = lines
    assert isinstance(charge, SettlementLine) and isinstance(refund_line, SettlementLine)
    assert (charge.line_no, charge.kind, charge.provider_line_id, charge.provider_payment_id,
            charge.reference, charge.gross_minor, charge.fee_minor, charge.net_minor,
            charge.gross_currency) == (
        1, LineKind.CHARGE, f"ln_{sale.provider_payment_id}", sale.provider_payment_id, sale.reference,
        5000, fee(5000), 5000 - fee(5000), "EUR")
    assert charge.occurred_at is not None and charge.occurred_at.date() == day
    assert (refund_line.kind, refund_line.provider_operation_id, refund_line.reference,
            refund_line.gross_minor) == (
        LineKind.REFUND, rf.provider_operation_id, rf.client_reference, -1200)


async def test_the_reader_refuses_a_batch_of_another_mode_and_names_each_http_failure(stack: Stack) -> None:
    day = await settlement_day(stack)
    await pay(stack, 5000)
    account = account_of(stack)
    # Configured as live, the key is the test one: the list answers test batches, which are refused.
    as_live = dataclasses.replace(account, environment="live")
    with pytest.raises(SettlementSourceError, match=r"belongs to account acct_store \(livemode False\), "
                                                    r"not cardco:acct_store:live: refused"):
        await settlement_source(as_live).batches(as_live.provider_account, day, day)

    source = settlement_source(account)
    listing = "/v1/settlements"
    for fault, message in (("rate_limit", r"settlement list: HTTP 429, rate limited \(Retry-After 1\)"),
                           ("not_processed_503", "settlement list: HTTP 503, the provider failed"),
                           ("malformed_body", "settlement list: the answer is not JSON")):
        await stack.sandbox.fault(fault, match={"reference": listing}, times=1)
        with pytest.raises(SettlementSourceError, match=message):
            await source.batches(ACCOUNT, day, day)
    [batch] = await source.batches(ACCOUNT, day, day)
    gone = dataclasses.replace(batch, provider_batch_id="stl_20000101_acct_store")
    with pytest.raises(SettlementSourceError, match="stl_20000101_acct_store's lines: HTTP 404, not found"):
        [line async for line in source.lines(gone)]
    lines_path = f"/v1/settlements/{batch.provider_batch_id}/lines"
    await stack.sandbox.fault("rate_limit", match={"reference": lines_path}, times=1)
    with pytest.raises(SettlementSourceError, match="lines: HTTP 429, rate limited"):
        [line async for line in source.lines(batch)]
    await stack.sandbox.fault("malformed_body", match={"reference": lines_path}, times=1)
    read: list[SettlementLine | BadLine] = []
    with pytest.raises(SettlementSourceError,
                       match=r"lines: the answer was cut short \(row 1 read in part\)"):
        async for line in source.lines(batch):
            read.append(line)
    assert [type(x) for x in read] == [BadLine]  # the half row, read before the end was seen
    assert len([line async for line in source.lines(batch)]) == 1  # whole again


# ---------------------------------------------------------------------------
# 5. The CLI




async def test_the_cli_reconciles_a_range_prints_json_and_exits_1_for_an_unreadable_batch(
        shell: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    day = await settlement_day(shell)
    await pay(shell, 5000)
    await plant(shell, day, {"type": "charge", "payment": "pay_notours", "currency": "EUR", "gross": 999})
    await close(shell, day)
    second_day = await next_day(shell, day)
    await pay(shell, 2000)
    await close(shell, second_day)
    fault_path = f"/v1/settlements/{batch_id_of(second_day)}/lines"
    await shell.sandbox.fault("not_processed_503", match={"reference": fault_path}, times=1)
    span = ["--account", ACCOUNT, "--from", day.isoformat(), "--to", second_day.isoformat()]

    assert await paycore("reconcile", "settlements", *span) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"{ACCOUNT}: 1 batches, 0 newly missing"
    assert batch_id_of(day) in out and "recorded" in out
    assert f"{batch_id_of(second_day)}" in out and "not read:" in out and "HTTP 503" in out
    assert await shell.pool.fetchval("SELECT count(*) FROM settlement_batches") == 1

    assert await paycore("reconcile", "settlements", *span, "--json") == 0
    document = json.loads(capsys.readouterr().out)
    assert document["failures"] == []
    [run] = document["accounts"]
    assert (run["provider_account"], run["unreadable"], run["new_missing"]) == (ACCOUNT, [], 0)
    assert [(b["provider_batch_id"], b["result"], b["lines"], b["matched"], b["exceptions"])
            for b in run["batches"]] == [(batch_id_of(day), "unchanged", 0, 0, 0),
                                         (batch_id_of(second_day), "recorded", 1, 1, 0)]
    assert [e["kind"] for e in await exceptions(shell.pool)] == ["unknown-payment"]


async def test_the_cli_reads_a_lines_csv_downloaded_from_cardco(
        shell: Stack, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    day = await settlement_day(shell)
    sale = await pay(shell, 5000)
    await refund(shell, sale, 900)
    await plant(shell, day, {"type": "charge", "payment": sale.provider_payment_id, "currency": "EUR",
                             "gross": 5000, "fee": fee(5000)})  # paid twice
    await close(shell, day)
    response = await shell.sandbox.http.get(f"/v1/settlements/{batch_id_of(day)}/lines", headers=auth())
    assert response.status_code == 200
    report = tmp_path / "cardco-lines.csv"
    report.write_bytes(response.content)
    assert len(rows_of(response.text)) == 3

    assert await paycore("reconcile", "settlements", "--account", ACCOUNT, "--file", str(report),
                         "--json") == 0
    [run] = json.loads(capsys.readouterr().out)["accounts"]
    [batch] = run["batches"]
    assert batch["provider_batch_id"].startswith("file:")
    assert (batch["result"], batch["lines"], batch["matched"], batch["exceptions"]) == ("recorded", 3, 2, 1)
    row = await batch_row(shell.pool, batch["provider_batch_id"])
    assert (row["source"], row["provider_status"], row["batch_date"], row["currency"]) == (
        "file", "closed", day, "EUR")
    [dup] = await exceptions(shell.pool)
    assert (dup["kind"], dup["attempt_id"], dup["line_no"]) == ("duplicate-line", sale.attempt_id, 3)
    assert await paycore("reconcile", "settlements", "--account", ACCOUNT, "--file", str(report)) == 0
    assert "unchanged" in capsys.readouterr().out  # the same file again: the same batch


async def test_the_cli_refuses_bad_arguments_with_exit_2(
        shell: Stack, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    report = tmp_path / "lines.csv"
    report.write_text("line_id,type,payment,refund,capture,reference,created,currency,gross,fee,net\n")
    assert await paycore("reconcile", "settlements", "--file", str(report)) == 2
    assert "--file needs exactly one --account" in capsys.readouterr().err
    assert await paycore("reconcile", "settlements", "--account", ACCOUNT, "--from", "2026-12-05",
                         "--to", "2026-12-04") == 2
    assert "--to 2026-12-04 is before --from 2026-12-05" in capsys.readouterr().err
    assert await paycore("reconcile", "settlements", "--account", "cardco:acct_nope:test") == 2
    assert "is not a configured account" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        await paycore("reconcile", "settlements", "--from", "05/12/2026")
    assert usage.value.code == 2
    assert await shell.pool.fetchval("SELECT count(*) FROM settlement_batches") == 0


# ---------------------------------------------------------------------------
# 6. The daily task


def daily(stack: Stack, clock: FakeClock, owner: str) -> SettlementTask:
    return SettlementTask(pool=stack.pool, clock=clock, settings=stack.settings, recovery=RecoverySettings(),
                          sources=readable_sources(stack.settings), owner=owner)


async def test_the_daily_run_reconciles_each_account_once_whoever_runs_it(stack: Stack) -> None:
    day = await settlement_day(stack)
    await pay(stack, 5000)
    await close(stack, day)
    clock = FakeClock(current=dt.datetime.combine(day + dt.timedelta(days=1), dt.time(5, 59), dt.UTC))
    first, second = daily(stack, clock, "recovery-a"), daily(stack, clock, "recovery-b")
    assert await first.run_due() == [] and await second.run_due() == []  # before 06:00
    assert await stack.pool.fetchval("SELECT count(*) FROM settlement_runs") == 0

    clock.advance(60)
    [run] = await first.run_due()
    assert [(o.provider_batch_id, o.result, o.matched_count) for o in run.outcomes] == [
        (batch_id_of(day), "recorded", 1)]
    assert await second.run_due() == []  # claimed and finished by the first
    assert await first.run_due() == []  # once a day
    [row] = await stack.pool.fetch("SELECT * FROM settlement_runs")
    assert (row["provider_account"], row["run_date"], row["owner"]) == (ACCOUNT, day + dt.timedelta(days=1),
                                                                        "recovery-a")
    assert row["finished_at"] == clock.now() and row["result"] == run.as_json()


async def test_a_daily_run_whose_list_fails_is_taken_over_after_its_lease(stack: Stack) -> None:
    day = await settlement_day(stack)
    await pay(stack, 5000)
    await close(stack, day)
    await stack.sandbox.fault("not_processed_503", match={"reference": "/v1/settlements"}, times=1)
    clock = FakeClock(current=dt.datetime.combine(day + dt.timedelta(days=1), dt.time(6), dt.UTC))
    first, second = daily(stack, clock, "recovery-a"), daily(stack, clock, "recovery-b")

    assert await first.run_due() == []  # the list failed: the run is claimed, not finished
    [row] = await stack.pool.fetch("SELECT * FROM settlement_runs")
    assert (row["owner"], row["finished_at"]) == ("recovery-a", None)
    assert await second.run_due() == []  # still within the first's lease
    assert await stack.pool.fetchval("SELECT count(*) FROM settlement_batches") == 0

    clock.advance(RecoverySettings().settlement_run_lease_s)
    [run] = await second.run_due()
    assert [o.result for o in run.outcomes] == ["recorded"]
    [row] = await stack.pool.fetch("SELECT * FROM settlement_runs")
    assert (row["owner"], row["finished_at"]) == ("recovery-b", clock.now())
    assert await first.run_due() == []


async def test_the_payments_of_an_unbalanced_day_between_reconciled_ones_are_not_missing(
        stack: Stack) -> None:
    """An unbalanced batch's lines are not recorded, but Cardco did name its payments: they are not
    ``missing-payment`` (its one ``unbalanced-batch`` exception is what a person looks at), even
    when reconciled batches on both sides put its day inside the window the missing check covers."""
    day = await settlement_day(stack)
    await pay(stack, 5000)
    await close(stack, day)
    middle = await next_day(stack, day)
    in_unbalanced = await pay(stack, 2000)
    await control(stack.sandbox.http, "totals",
                  {"account": "acct_store", "date": middle.isoformat(), "gross": 1})
    await close(stack, middle)
    last = await next_day(stack, middle)
    await pay(stack, 3000)
    await close(stack, last)

    later = dt.datetime.combine(last, dt.time(12), dt.UTC) + GRACE + dt.timedelta(days=1)
    run = await reconcile(stack, day, last, now=later)
    assert [o.result for o in run.outcomes] == ["recorded", "unbalanced", "recorded"]
    assert run.new_missing == 0
    assert [e["kind"] for e in await exceptions(stack.pool)] == ["unbalanced-batch"]
    assert in_unbalanced.attempt_id not in {e["attempt_id"] for e in await exceptions(stack.pool)}
