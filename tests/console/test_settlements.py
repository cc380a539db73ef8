"""The Settlements pages and their API: batches per account and day, one batch's totals, lines and
exceptions (paged, each with its escalation), the missing payments in no batch, and the chart of
fees and exceptions per day -- on rows written as the reconciliation engine writes them."""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from datetime import timedelta

import asyncpg
import pytest

from paycore.accounts import apply_provider_account
from paycore.clock import FakeClock
from paycore.config import ProviderAccountConfig
from tests.console.conftest import ConsoleRig
from tests.console.settlement_rows import batch, exception
from tests.console.test_api_schemas import get
from tests.console.test_pages import section
from tests.matrix.helpers import account_config, seed_account, started_attempt


@dataclass
class Rows:
    account: str
    other: str
    clean: int  # yesterday's batch of the account: balanced, no exception
    troubled: int  # the day before's: reported fees differ, three exceptions
    old: int  # 40 days ago: outside the default range
    foreign: int  # the other account's, yesterday
    attempt_id: str
    exceptions: list[int]  # the troubled batch's, by line
    escalations: list[int]
    missing: int  # a missing payment, in no batch
    missing_escalation: int


@pytest.fixture
async def rows(pool: asyncpg.Pool, clock: FakeClock) -> Rows:
    account: ProviderAccountConfig = await seed_account(pool, clock)
    other = account_config("live")
    async with pool.acquire() as conn, conn.transaction():
        await apply_provider_account(conn, other, clock.now())
    paid = await started_attempt(pool, clock, account, customer="cus_settled")
    now = clock.now()
    today = now.date()
    acct = account.provider_account
    clean = await batch(pool, acct, "stl_clean", today - timedelta(days=1), now,
                        lines=[("charge", 4999, 150, paid.attempt_id, "matched"),
                               ("fee", 0, 25, None, "booked")])
    troubled = await batch(pool, acct, "stl_troubled", today - timedelta(days=2), now - timedelta(days=1),
                           lines=[("charge", 1000, 30, None, "exception"),
                                  ("refund", -500, 0, None, "exception"),
                                  ("charge", 2000, 60, None, "matched")],
                           reported=(2500, 95, 2405), exceptions=3, bad_lines=1)
    old = await batch(pool, acct, "stl_old", today - timedelta(days=40), now - timedelta(days=39))
    foreign = await batch(pool, other.provider_account, "stl_foreign", today - timedelta(days=1), now)
    found = now - timedelta(days=1)
    made = [await exception(pool, acct, "unknown-payment", found, batch_id=troubled, line_no=1,
                            evidence={"provider_payment_id": "pay_stranger", "gross_minor": 1000}),
            await exception(pool, acct, "unknown-refund", found, batch_id=troubled, line_no=2,
                            evidence={"provider_operation_id": "re_stranger"}),
            await exception(pool, acct, "malformed-line", found, batch_id=troubled, line_no=4,
                            evidence={"reason": "not a number: 'x'", "raw": {"amount": "x"}})]
    missing = await exception(pool, acct, "missing-payment", now - timedelta(hours=2),
                              attempt_id=paid.attempt_id, evidence={"succeeded_at": now.isoformat()})
    return Rows(acct, other.provider_account, clean, troubled, old, foreign, str(paid.attempt_id),
                [e for e, _ in made], [s for _, s in made], missing[0], missing[1])


def batch_ids(page: str) -> list[int]:
    return [int(i) for i in re.findall(r'<tr id="batch-(\d+)" data-testid="settlement-batch"', page)]


def exception_ids(page: str) -> list[int]:
    return [int(i) for i in re.findall(r'<tr id="exception-(\d+)"', page)]


async def test_the_settlements_page_lists_batches_per_account_and_day_with_their_money(
    rig: ConsoleRig, rows: Rows,
) -> None:
    browser = await rig.browser(role="viewer")
    page = (await browser.client.get("/settlements")).text
    assert 'id="nav-settlements" href="/settlements" aria-current="page"' in page
    # The last 30 days by default, newest first: the old batch is left out.
    assert batch_ids(page) == [rows.foreign, rows.clean, rows.troubled]
    clean = section(page, "batches", rf'<tr id="batch-{rows.clean}"[^>]*>(.*?)</tr>')
    cells = re.findall(r"<td[^>]*>(.*?)</td>", clean, re.S)
    link = f'<a class="batch-link" href="/settlements/batches/{rows.clean}">stl_clean</a>'
    yesterday = (rig.clock.now().date() - timedelta(days=1)).isoformat()
    assert cells[:9] == [rows.account, link, yesterday, "closed", "reconciled", "2", "1", "0", "0"]
    assert cells[9:12] == ["49.99 EUR", "1.75 EUR", "48.24 EUR"]  # gross, fees, net
    # Filtered by account and by a date range that reaches the old batch.
    mine = (await browser.client.get("/settlements", params={"account": rows.other})).text
    assert batch_ids(mine) == [rows.foreign]
    older = rig.clock.now().date() - timedelta(days=60)
    ranged = (await browser.client.get("/settlements", params={"account": rows.account,
                                                               "from": older.isoformat()})).text
    assert batch_ids(ranged) == [rows.clean, rows.troubled, rows.old]
    # Paged by cursor: every batch once.
    seen: list[int] = []
    url: str | None = f"/settlements?from={older.isoformat()}&limit=1"
    while url is not None:
        listed = (await browser.client.get(url)).text
        seen += batch_ids(listed)
        found = re.search(r'<a id="next-page" data-testid="next-page" href="([^"]+)"', listed)
        url = found.group(1).replace("&amp;", "&") if found else None
        assert len(seen) <= 5
    assert seen == [rows.foreign, rows.clean, rows.troubled, rows.old]
    # A bad filter is a 400, not a 500.
    for bad in ({"from": "yesterday"}, {"from": "2026-11-20", "to": "2026-11-01"}, {"days": "7"}):
        assert (await browser.client.get("/settlements", params=bad)).status_code == 400, bad


async def test_missing_payments_in_no_batch_are_listed_with_their_escalation(
    rig: ConsoleRig, rows: Rows,
) -> None:
    browser = await rig.browser(role="viewer")
    page = (await browser.client.get("/settlements")).text
    missing = section(page, "not-in-any-batch", r"<tbody>(.*?)</tbody>")
    assert exception_ids(missing) == [rows.missing]
    assert f'href="/attempts/{rows.attempt_id}"' in missing
    assert f'<a class="escalation" href="/escalations/{rows.missing_escalation}">open' in missing
    other = (await browser.client.get("/settlements", params={"account": rows.other})).text
    assert exception_ids(section(other, "not-in-any-batch", r"<tbody>(.*?)</tbody>")) == []


async def test_the_batch_page_shows_totals_lines_by_kind_and_paged_exceptions_with_their_episodes(
    rig: ConsoleRig, rows: Rows,
) -> None:
    browser = await rig.browser()
    page = (await browser.client.get(f"/settlements/batches/{rows.troubled}")).text
    assert '<dd id="batch-state" class="state-reconciled">reconciled</dd>' in page
    # Reported fees 0.95 against 0.90 computed (and so net): highlighted; gross agrees.
    assert re.findall(r'<tr id="total-(\w+)" class="mismatch"', page) == ["fees", "net"]
    gross = section(page, "batch-totals", r'<tr id="total-gross">(.*?)</tr>')
    assert re.findall(r'<td class="money">(.*?)</td>', gross) == ["25.00 EUR", "25.00 EUR"]
    charge = section(page, "line-kinds", r'<tr id="kind-charge-EUR"[^>]*>(.*?)</tr>')
    assert re.findall(r"<td[^>]*>(.*?)</td>", charge) == ["2", "30.00 EUR", "0.90 EUR", "29.10 EUR"]
    assert 'id="kind-refund-EUR"' in page
    # Exceptions by line, paged two at a time; each links its escalation, whose state shows.
    seen: list[int] = []
    url: str | None = f"/settlements/batches/{rows.troubled}?limit=2"
    while url is not None:
        listed = (await browser.client.get(url)).text
        seen += exception_ids(listed)
        found = re.search(r'<a id="next-page" data-testid="next-page" href="([^"]+)"', listed)
        url = found.group(1).replace("&amp;", "&") if found else None
        assert len(seen) <= 5
    assert seen == rows.exceptions
    assert "pay_stranger" in page and "not a number" in page
    # Resolved with the escalation's own action: the batch page shows it resolved.
    flash = await browser.flash_after(await browser.post_form(f"/escalations/{rows.escalations[0]}/resolve",
                                                              reason="a test payment, booked by hand"))
    assert "resolved" in flash
    after = (await browser.client.get(f"/settlements/batches/{rows.troubled}")).text
    first = section(after, "batch-exceptions", rf'<tr id="exception-{rows.exceptions[0]}"[^>]*>(.*?)</tr>')
    assert f'href="/escalations/{rows.escalations[0]}">resolved' in first
    assert (await browser.client.get("/settlements/batches/999999")).status_code == 404


async def test_the_chart_draws_fees_and_exceptions_per_day(rig: ConsoleRig, rows: Rows) -> None:
    browser = await rig.browser(role="viewer")
    page = (await browser.client.get("/settlements")).text
    bars = re.findall(r'data-series="(\w+)" data-value="(-?\d+)"', section(page, "settlement-charts",
                                                                           r"(<svg.*</svg>)"))
    assert len(bars) == 60  # two series, 30 days
    assert bars[-4:] == [("fees", str(175 + 0)), ("exceptions", "3"), ("fees", "0"), ("exceptions", "1")]
    assert ("fees", "90") in bars  # the troubled batch, two days ago
    ninety = (await browser.client.get("/settlements", params={"days": "90"})).text
    assert len(re.findall(r'data-series="fees"', ninety)) == 90
    assert "<script" not in page.split("</head>")[1]


async def test_the_api_answers_the_same_as_documented(rig: ConsoleRig, rows: Rows) -> None:
    browser = await rig.browser(role="viewer")
    listed = await get(browser, "/api/v1/settlements/batches?limit=2")
    assert [b["batch_id"] for b in listed["items"]] == [rows.foreign, rows.clean]
    rest = await get(browser, f"/api/v1/settlements/batches?limit=2&cursor={listed['next_cursor']}")
    assert [b["batch_id"] for b in rest["items"]] == [rows.troubled] and rest["next_cursor"] is None
    detail = await get(browser, f"/api/v1/settlements/batches/{rows.troubled}")
    assert {t["name"]: (t["reported"], t["computed"]) for t in detail["totals"]}["fees"] == (95, 90)
    assert detail["batch_date"] == (rig.clock.now().date() - timedelta(days=2)).isoformat()
    found = await get(browser, f"/api/v1/settlements/batches/{rows.troubled}/exceptions")
    assert [x["exception_id"] for x in found["items"]] == rows.exceptions
    assert found["items"][0]["escalation_status"] == "open"
    missing = await get(browser, "/api/v1/settlements/unbatched-exceptions")
    assert [x["exception_id"] for x in missing["items"]] == [rows.missing]
    days = await get(browser, "/api/v1/settlements/days")
    assert len(days["items"]) == 30 and days["items"][-2] == {
        "day": (rig.clock.now().date() - timedelta(days=1)).isoformat(), "fees_minor": {"EUR": 175},
        "exceptions": 3}
    for bad in ("/api/v1/settlements/batches?from=x", "/api/v1/settlements/days?days=7",
                "/api/v1/settlements/batches/999999/exceptions"):
        answer = await browser.client.get(bad)
        assert answer.status_code in (400, 404), bad
        assert answer.headers["content-type"] == "application/problem+json"


async def test_a_batchs_lines_export_as_csv_with_what_each_matched(
    rig: ConsoleRig, rows: Rows, pool: asyncpg.Pool,
) -> None:
    # A provider's own text that a spreadsheet would run as a formula is exported inert.
    await pool.execute("UPDATE settlement_lines SET provider_line_id = '=HYPERLINK(1)' "
                       "WHERE batch_id = $1 AND line_no = 2", rows.clean)
    browser = await rig.browser(role="viewer")
    page = (await browser.client.get(f"/settlements/batches/{rows.clean}")).text
    assert f'href="/settlements/batches/{rows.clean}/lines.csv"' in page
    answer = await browser.client.get(f"/settlements/batches/{rows.clean}/lines.csv")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/csv")
    assert "attachment" in answer.headers["content-disposition"]
    exported = list(csv.DictReader(io.StringIO(answer.text)))
    assert [(r["line_no"], r["kind"], r["gross_minor"], r["fee_minor"], r["net_minor"], r["outcome"])
            for r in exported] == [("1", "charge", "4999", "150", "4849", "matched"),
                                   ("2", "fee", "0", "25", "-25", "booked")]
    assert exported[0]["attempt_id"] == rows.attempt_id and exported[0]["order_id"]
    assert exported[1]["provider_line_id"] == "'=HYPERLINK(1)"
    assert (await browser.client.get("/settlements/batches/999999/lines.csv")).status_code == 404
