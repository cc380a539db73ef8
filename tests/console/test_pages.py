"""What the pages and the API show: the overview and its chart, listings with filters and cursors,
the attempt page, viewers' pages without forms, errors, and nothing secret anywhere."""

from __future__ import annotations

import hashlib
import re
import uuid
from datetime import timedelta
from pathlib import Path

import asyncpg
import pytest

from paycore import leases
from paycore.attempts import Attempt, get_attempt, record_outcome
from paycore.clock import FakeClock
from paycore.config import ProviderAccountConfig
from paycore.domain import ProviderOutcome
from paycore.notifications import record_notification
from paycore.payment_methods import contains_card_number
from paycore_console import api
from paycore_console.openapi import document, openapi_path
from tests.console.conftest import ConsoleRig
from tests.console.test_actions import dead_end_episode
from tests.matrix.helpers import seed_account, started_attempt
from tests.operators.test_inspection import episode, queued, went_unknown

HTMX_SHA256 = "e209dda5c8235479f3166defc7750e1dbcd5a5c1808b7792fc2e6733768fb447"
UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@pytest.fixture
async def account(pool: asyncpg.Pool, clock: FakeClock) -> ProviderAccountConfig:
    return await seed_account(pool, clock)


async def test_the_overview_shows_states_escalations_outbox_and_a_server_drawn_chart(
    rig: ConsoleRig, account: ProviderAccountConfig,
) -> None:
    attempt, _ = await dead_end_episode(rig.pool, rig.clock, account)
    await went_unknown(rig.pool, attempt.attempt_id, rig.clock.now() - timedelta(hours=2))
    await queued(rig.pool, rig.clock, "order-confirmation", dead=True)
    rig.clock.advance(30)
    pending_since = rig.clock.now()
    await queued(rig.pool, rig.clock, "order-confirmation")
    await queued(rig.pool, rig.clock, "fulfillment-request")
    now = rig.clock.now()
    await rig.pool.executemany(
        "INSERT INTO provider_rate_limit_pauses (scope, paused_until, reason, updated_at)"
        " VALUES ($1, $2, $3, $4)",
        [("cardco:acct_store:test", now + timedelta(minutes=5), "provider 429 (Retry-After 300)", now),
         ("cardco:acct_old:test", now - timedelta(seconds=1), "over already", now)])
    browser = await rig.browser(role="viewer")
    page = (await browser.client.get("/")).text
    # The outbox backlog per kind: pending, dead letters (a link to them), the oldest pending.
    confirmations = section(page, "outbox-summary", r'<tr id="outbox-kind-order-confirmation">(.*?)</tr>')
    assert re.findall(r"<td>(.*?)</td>", confirmations)[:2] == [
        "1", '<a href="/outbox?kind=order-confirmation">1</a>']
    assert f'datetime="{pending_since.isoformat()}"' in confirmations
    fulfilment = section(page, "outbox-summary", r'<tr id="outbox-kind-fulfillment-request">(.*?)</tr>')
    assert re.findall(r"<td>(.*?)</td>", fulfilment)[:2] == ["1", "0"]
    # Paused provider scopes: the one still paused, until when and why; not the one that is over.
    paused = section(page, "paused-scopes", r'<tr id="paused-cardco:acct_store:test">(.*?)</tr>')
    assert f'datetime="{(now + timedelta(minutes=5)).isoformat()}"' in paused
    assert "<td>provider 429 (Retry-After 300)</td>" in paused
    assert "acct_old" not in page
    unknown_row = re.search(r'<tr id="state-Unknown">(.*?)</tr>', page, re.S)
    assert unknown_row is not None and '<td class="total">1</td>' in unknown_row.group(1)
    assert f'href="/attempts/{attempt.attempt_id}"' in page  # the oldest Unknown
    assert 'href="/escalations?reason=deadline"' in page
    assert re.search(r'<svg id="chart-svg"', page)
    bars = re.findall(r'data-series="(\w+)" data-value="(\d+)"', page)
    assert len(bars) == 48  # two series, 24 hours
    assert ("unknown", "1") in bars and ("escalations", "1") in bars
    assert "<script" not in page.split("</head>")[1]  # no script in the body: the chart is plain SVG
    api_view = (await browser.client.get("/api/v1/overview")).json()
    assert len(api_view["last_24h"]) == 24
    assert api_view["oldest_unknown"]["attempt_id"] == str(attempt.attempt_id)


def section(page: str, section_id: str, pattern: str) -> str:
    """The first match of ``pattern`` inside the page's ``<section id=section_id>``."""
    found = re.search(rf'<section id="{section_id}".*?</section>', page, re.S)
    assert found is not None, f"no section {section_id}"
    inner = re.search(pattern, found.group(0), re.S)
    assert inner is not None, (pattern, found.group(0))
    return inner.group(1)


async def test_escalations_are_paged_by_cursor_and_filtered_on_the_page_and_the_api(
    rig: ConsoleRig, account: ProviderAccountConfig,
) -> None:
    now = rig.clock.now()
    ids = [await episode(rig.pool, now - timedelta(minutes=10 - i), "deadline") for i in range(5)]
    other = await episode(rig.pool, now, "unmatched-payment")
    browser = await rig.browser()
    await browser.flash_after(await browser.post_form(f"/escalations/{ids[1]}/ack"))
    seen: list[int] = []
    url: str | None = "/escalations?reason=deadline&limit=2"
    while url is not None:
        page = (await browser.client.get(url)).text
        seen += [int(i) for i in re.findall(r'<tr id="escalation-(\d+)"', page)]
        found = re.search(r'<a id="next-page" data-testid="next-page" href="([^"]+)"', page)
        url = found.group(1).replace("&amp;", "&") if found else None
        assert len(seen) <= 10
    assert seen == ids  # oldest first, every one once, the other reason left out
    acked = (await browser.client.get("/escalations?acknowledged=yes")).text
    assert re.findall(r'<tr id="escalation-(\d+)"', acked) == [str(ids[1])]
    items, cursor, everything = [], None, []
    while True:
        answer = (await browser.client.get("/api/v1/escalations", params={"limit": 4, **(
            {"cursor": cursor} if cursor else {})})).json()
        everything += [i["escalation_id"] for i in answer["items"]]
        cursor = answer["next_cursor"]
        if cursor is None:
            break
    assert everything == [*ids, other]
    items = (await browser.client.get("/api/v1/escalations", params={"acknowledged": "false",
                                                                     "reason": "deadline"})).json()["items"]
    assert [i["escalation_id"] for i in items] == [i for i in ids if i != ids[1]]
    bad = await browser.client.get("/api/v1/escalations", params={"cursor": "not-a-cursor"})
    assert bad.status_code == 400 and bad.headers["content-type"] == "application/problem+json"
    assert (await browser.client.get("/escalations?cursor=not-a-cursor")).status_code == 400


async def test_a_viewer_sees_the_pages_without_any_action_form(
    rig: ConsoleRig, account: ProviderAccountConfig,
) -> None:
    attempt, eid = await dead_end_episode(rig.pool, rig.clock, account)
    await queued(rig.pool, rig.clock, "order-confirmation", dead=True)
    viewer = await rig.browser("watcher", role="viewer")
    operator = await rig.browser("ops-1")
    for path in (f"/escalations/{eid}", f"/attempts/{attempt.attempt_id}", "/outbox"):
        as_viewer = await viewer.client.get(path)
        as_operator = await operator.client.get(path)
        assert as_viewer.status_code == as_operator.status_code == 200
        actions_of = re.compile(r'<form id="(?!logout-form|escalation-filters|dead-letter-filter)[^"]*"[^>]*'
                                r'method="post"')
        assert not actions_of.search(as_viewer.text), path
        assert actions_of.search(as_operator.text), path


async def test_the_attempt_page_shows_the_history_as_a_timeline_and_its_actions(
    rig: ConsoleRig, account: ProviderAccountConfig,
) -> None:
    attempt, eid = await dead_end_episode(rig.pool, rig.clock, account)
    browser = await rig.browser()
    await browser.flash_after(await browser.post_form(f"/escalations/{eid}/ack", reason="on it"))
    page = (await browser.client.get(f"/attempts/{attempt.attempt_id}")).text
    assert "<title>Attempt " in page
    assert len(re.findall(r'data-testid="history-event"', page)) >= 2
    assert 'data-action="escalation-acknowledge"' in page and '<td class="operator">ops-1</td>' in page
    assert f'href="/escalations/{eid}"' in page
    assert 'id="close-form"' in page


async def test_the_attempt_page_shows_order_amount_lease_next_check_notifications_and_outbox_rows(
    rig: ConsoleRig, account: ProviderAccountConfig,
) -> None:
    attempt, _ = await dead_end_episode(rig.pool, rig.clock, account)
    aid = attempt.attempt_id
    async with rig.pool.acquire() as conn, conn.transaction():
        matched = await record_notification(
            conn, provider_account=account.provider_account, key="evt_seen", attempt_id=aid,
            now=rig.clock.now(),
            detail={"type": "payment.processing", "status": "processing", "provider_payment_id": "pay_seen",
                    "reference": attempt.client_reference, "amount_minor": attempt.amount_minor,
                    "currency": attempt.currency, "event": {"id": "evt_seen"}})
    dead = await queued(rig.pool, rig.clock, "order-confirmation", attempt_id=aid, dead=True,
                        error="broker refused the record")
    claimed_at = rig.clock.now() + timedelta(hours=1)  # due by then
    assert await leases.claim(rig.pool, aid, leases.new_lease("recovery-7"), claimed_at, lease_s=30)
    shown = await get_attempt(rig.pool, aid)
    browser = await rig.browser(role="viewer")
    page = (await browser.client.get(f"/attempts/{aid}")).text

    assert f'<dd id="attempt-order">{attempt.order_id} (Open), attempt #1</dd>' in page
    amount = re.search(r'<dd id="attempt-amount">(.*?)</dd>', page)
    assert amount is not None and re.sub(r"<[^>]+>", "", amount.group(1)) == "49.99 EUR (4999 minor units)"
    lease = re.search(r'<dd id="attempt-lease">(.*?)</dd>', page)
    assert lease is not None and lease.group(1).startswith("recovery-7 until ")
    assert f'datetime="{(claimed_at + timedelta(seconds=30)).isoformat()}"' in lease.group(1)
    next_check = re.search(r'<dd id="attempt-next-check">(.*?)</dd>', page)
    assert next_check is not None and f'datetime="{shown.next_check_at.isoformat()}"' in next_check.group(1)
    seen = section(page, "notifications", rf'<tr id="matched-{matched.event_id}"[^>]*>(.*?)</tr>')
    assert re.findall(r"<td[^>]*>(.*?)</td>", seen)[2:] == [
        "payment.processing", "processing", "pay_seen", attempt.client_reference, "49.99 EUR"]
    row = section(page, "attempt-outbox", rf'<tr id="outbox-{dead}"[^>]*>(.*?)</tr>')
    assert re.findall(r"<td>(.*?)</td>", row) == [
        str(dead), "order-confirmation", "dead-lettered", "10", "broker refused the record"]
    assert "evt_seen" not in page.split('id="history"')[0]  # the provider's event is never shown


async def test_a_finished_attempt_shows_no_next_check(
    rig: ConsoleRig, account: ProviderAccountConfig,
) -> None:
    attempt = await started_attempt(rig.pool, rig.clock, account)
    browser = await rig.browser(role="viewer")
    assert 'id="attempt-next-check"' in (await browser.client.get(f"/attempts/{attempt.attempt_id}")).text
    await record_outcome(rig.pool, attempt.attempt_id, ProviderOutcome.succeeded("pay_9", 4999, "EUR"),
                         now=rig.clock.now(), actor="test", recheck_after_s=60,
                         reminder_interval=timedelta(minutes=15))
    page = (await browser.client.get(f"/attempts/{attempt.attempt_id}")).text
    assert 'data-state="Succeeded"' in page and "Next check" not in page


async def attempts_of_every_kind(rig: ConsoleRig, account: ProviderAccountConfig) -> list[Attempt]:
    """Four attempts a minute apart (oldest first): Started, Unknown, Succeeded, Started."""
    made = []
    for i in range(4):
        made.append(await started_attempt(rig.pool, rig.clock, account, customer=f"cus_{i}", amount=1000 + i))
        rig.clock.advance(60)
    await record_outcome(rig.pool, made[1].attempt_id, ProviderOutcome.unknown("provider.no-response.caller"),
                         now=rig.clock.now(), actor="test", recheck_after_s=60,
                         reminder_interval=timedelta(minutes=15))
    await record_outcome(rig.pool, made[2].attempt_id, ProviderOutcome.succeeded("pay_found", 1002, "EUR"),
                         now=rig.clock.now(), actor="test", recheck_after_s=60,
                         reminder_interval=timedelta(minutes=15))
    return made


async def test_the_attempts_list_is_newest_first_filtered_and_paged_by_cursor(
    rig: ConsoleRig, account: ProviderAccountConfig,
) -> None:
    made = await attempts_of_every_kind(rig, account)
    browser = await rig.browser(role="viewer")

    def listed(html: str) -> list[str]:
        return re.findall(r'<tr id="attempt-([0-9a-f-]{36})" data-testid="attempt-row"', html)

    page = (await browser.client.get("/attempts")).text
    assert listed(page) == [str(a.attempt_id) for a in reversed(made)]
    amounts = re.findall(r'data-testid="attempt-amount"[^>]*>([^<]*)<', page)
    assert amounts == ["10.03 EUR", "10.02 EUR", "10.01 EUR", "10.00 EUR"]  # as people read money
    first = await browser.client.get("/attempts", params={"limit": "3"})
    assert listed(first.text) == [str(a.attempt_id) for a in reversed(made[1:])]
    more = re.search(r'<a id="next-page" data-testid="next-page" href="([^"]+)"', first.text)
    assert more is not None
    second = await browser.client.get(more.group(1).replace("&amp;", "&"))
    assert listed(second.text) == [str(made[0].attempt_id)] and 'id="next-page"' not in second.text

    filtered = {
        "state=Unknown": [made[1]], "state=Started": [made[3], made[0]], f"q={made[2].order_id}": [made[2]],
        f"q={made[1].client_reference}": [made[1]], "q=pay_found": [made[2]],
        f"q={made[3].attempt_id}": [made[3]], f"account={account.provider_account}": list(reversed(made)),
        "account=cardco:acct_other:test": [], "age=1h": [],
    }
    for query, expected in filtered.items():
        html = (await browser.client.get(f"/attempts?{query}")).text
        assert listed(html) == [str(a.attempt_id) for a in expected], query
    rig.clock.advance(3600 - 240 + 59)  # made[0] is an hour and 59 s old, made[1] a second short of it
    browser = await rig.browser("watcher-2", role="viewer")  # the first one's session went idle meanwhile
    assert listed((await browser.client.get("/attempts?age=1h")).text) == [str(made[0].attempt_id)]

    api = (await browser.client.get("/api/v1/attempts", params={"state": "Succeeded"})).json()
    assert [i["attempt_id"] for i in api["items"]] == [str(made[2].attempt_id)] and api["next_cursor"] is None
    assert api["items"][0]["amount_minor"] == 1002 and api["items"][0]["provider_payment_id"] == "pay_found"
    for bad in ("state=Paid", "cursor=bm90LWEtY3Vyc29y", "older_than_s=-1", "older_than_s=soon"):
        answer = await browser.client.get(f"/api/v1/attempts?{bad}")
        assert answer.status_code == 400 and answer.headers["content-type"] == "application/problem+json", bad
    assert (await browser.client.get("/attempts?age=forever")).status_code == 400
    # An attempt id in the lookup form goes straight to its page.
    go = await browser.client.get("/attempts", params={"attempt_id": str(made[1].attempt_id)})
    assert go.status_code == 303 and go.headers["location"] == f"/attempts/{made[1].attempt_id}"


async def test_the_outbox_page_states_its_policy_and_the_backlog_per_kind(
    rig: ConsoleRig, account: ProviderAccountConfig,
) -> None:
    from html import escape

    from paycore_console.pages import OUTBOX_POLICY

    oldest = rig.clock.now()
    await queued(rig.pool, rig.clock, "order-confirmation")
    rig.clock.advance(60)
    await queued(rig.pool, rig.clock, "order-confirmation")
    dead = await queued(rig.pool, rig.clock, "order-confirmation", dead=True)
    await queued(rig.pool, rig.clock, "operator-alert", dead=True)
    browser = await rig.browser(role="viewer")
    page = (await browser.client.get("/outbox")).text
    policy = re.search(r'<p id="outbox-policy"[^>]*>(.*?)</p>', page, re.S)
    assert policy is not None and policy.group(1) == escape(OUTBOX_POLICY)
    assert "keeps blocking the later rows of its attempt" in OUTBOX_POLICY  # what it says, in short
    backlog = {kind: re.findall(r"<td>(.*?)</td>", cells) for kind, cells in re.findall(
        r'<tr id="backlog-([\w-]+)"><th>[^<]*</th>(.*?)</tr>', page)}
    assert set(backlog) == {"order-confirmation", "operator-alert"}
    assert backlog["order-confirmation"][:2] == ["2", "1"]
    assert f'datetime="{oldest.isoformat()}"' in backlog["order-confirmation"][2]
    assert backlog["operator-alert"] == ["0", "1", "—"]
    assert f'id="dead-letter-{dead}"' in page


async def test_unknown_ids_are_an_html_page_on_pages_and_a_problem_on_the_api(rig: ConsoleRig) -> None:
    browser = await rig.browser()
    page = await browser.client.get(f"/attempts/{uuid.uuid4()}")
    assert page.status_code == 404 and page.headers["content-type"].startswith("text/html")
    assert 'id="error"' in page.text
    assert (await browser.client.get("/no/such/page")).status_code == 404
    answer = await browser.client.get(f"/api/v1/attempts/{uuid.uuid4()}")
    assert answer.status_code == 404 and answer.headers["content-type"] == "application/problem+json"
    assert (await browser.client.get("/api/v1/escalations/99999")).status_code == 404


async def test_an_error_page_keeps_the_navigation_and_sign_out_for_a_signed_in_operator(
    rig: ConsoleRig,
) -> None:
    browser = await rig.browser()
    missing = await browser.client.get("/no/such/page")
    assert missing.status_code == 404 and 'id="error"' in missing.text
    for shown in ('id="nav"', 'id="logout"', 'id="operator-name">ops-1'):
        assert shown in missing.text, shown
    anonymous = await rig.client().get("/no/such/page")
    assert anonymous.status_code == 404 and 'id="nav"' not in anonymous.text
    icon = await rig.client().get("/favicon.ico")  # no sign-in needed, and not a 404
    assert icon.status_code == 200 and icon.headers["content-type"] == "image/x-icon"
    assert icon.content.startswith(b"\x00\x00\x01\x00")  # an ICO
    assert "no-store" not in icon.headers.get("cache-control", "")


async def test_an_unmatched_payment_escalation_links_its_notification_to_the_attach_page(
    rig: ConsoleRig, account: ProviderAccountConfig,
) -> None:
    async with rig.pool.acquire() as conn, conn.transaction():
        stray = await record_notification(
            conn, provider_account=account.provider_account, key="evt_stray", attempt_id=None,
            now=rig.clock.now(),
            detail={"type": "payment.succeeded", "reference": "ORD-typo", "amount_minor": 2500,
                    "currency": "EUR", "event": {"id": "evt_stray"}})
        [eid] = [await conn.fetchval(
            "INSERT INTO payment_escalations (escalation_key, reason, raised_at, next_reminder_at, detail)"
            " VALUES ('notification:x:evt_stray:unmatched', 'unmatched-payment', $1, $1, $2)"
            " RETURNING escalation_id", rig.clock.now(),
            {"provider_account": account.provider_account, "notification_event_id": stray.event_id})]
    viewer = await rig.browser("watcher", role="viewer")
    page = (await viewer.client.get(f"/escalations/{eid}")).text
    assert f'<a id="escalation-notification" href="/notifications/{stray.event_id}/attach">' in page
    listing = (await viewer.client.get("/notifications/unmatched")).text
    found = re.search(rf'<tr id="notification-{stray.event_id}"[^>]*>(.*?)</tr>', listing, re.S)
    assert found is not None
    row = found.group(1)
    assert ">25.00 EUR<" in row and row.count("<td") == 9  # a viewer has no empty action column
    operator = await rig.browser("ops-1")
    as_operator = (await operator.client.get("/notifications/unmatched")).text
    assert f'id="attach-{stray.event_id}"' in as_operator


@pytest.mark.parametrize("path", ["/api/v1/escalations?reason=dead%00line", "/api/v1/escalations?account=%00",
                                  "/api/v1/outbox/dead-letters?kind=x%00", "/api/v1/attempts?q=ord%00",
                                  "/escalations?reason=%00", "/attempts?q=%00", "/api/v1/attempts?x%00=1",
                                  "/notifications/unmatched?cursor=%00"])
async def test_a_nul_in_a_query_parameter_is_a_400_problem_not_a_500(rig: ConsoleRig, path: str) -> None:
    browser = await rig.browser(role="viewer")
    answer = await browser.client.get(path)
    assert answer.status_code == 400, answer.text
    assert answer.headers["content-type"] == "application/problem+json" and answer.headers["x-request-id"]
    assert answer.json()["type"].endswith("/invalid-text")


async def test_no_page_or_api_answer_holds_a_secret_or_card_number(
    rig: ConsoleRig, account: ProviderAccountConfig,
) -> None:
    attempt, eid = await dead_end_episode(rig.pool, rig.clock, account)
    card = "4242424242424242"
    await rig.pool.execute("UPDATE payment_attempts SET request_body = $2 WHERE attempt_id = $1",
                           attempt.attempt_id, f'{{"card": {{"number": "{card}"}}, "key": "sk_test_abc"}}')
    async with rig.pool.acquire() as conn, conn.transaction():
        stored = await record_notification(
            conn, provider_account=account.provider_account, key="evt_x", attempt_id=None,
            now=rig.clock.now(), detail={"type": "payment.succeeded", "provider_payment_id": "pay_x",
                                         "event": {"secret": "whsec_leak", "card": card}})
    mid = await queued(rig.pool, rig.clock, "order-confirmation", dead=True, error="refused by broker")
    browser = await rig.browser()
    session_token = browser.client.cookies.get("paycore_console_session")
    assert session_token
    paths = ["/", "/escalations", f"/escalations/{eid}", f"/attempts/{attempt.attempt_id}",
             "/notifications/unmatched",
             f"/notifications/{stored.event_id}/attach?attempt_id={attempt.attempt_id}",
             "/outbox", "/api/v1/overview", "/api/v1/escalations", f"/api/v1/escalations/{eid}",
             f"/api/v1/attempts/{attempt.attempt_id}", "/api/v1/notifications/unmatched",
             "/api/v1/outbox/dead-letters"]
    for path in paths:
        answer = await browser.client.get(path)
        assert answer.status_code == 200, path
        text = UUID_RE.sub("", answer.text)  # ids are hex, not card numbers
        assert "whsec_" not in text and "sk_" not in text, path
        assert not contains_card_number(text), path
        assert session_token not in text, path
    assert f'id="dead-letter-{mid}"' in (await browser.client.get("/outbox")).text


def test_every_api_route_is_in_the_openapi_document_and_nothing_else() -> None:
    from starlette.routing import Route

    from paycore_console.app import create_app
    from paycore_console.settings import ConsoleSettings
    from tests.console.conftest import SECRET

    app = create_app(ConsoleSettings.from_env({"PAYCORE_DATABASE_URL": "postgresql://unused/x",
                                               "PAYCORE_CONSOLE_SECRET": SECRET}))
    served = {(m.lower(), openapi_path(r.path)) for r in app.routes if isinstance(r, Route)
              and (r.path.startswith("/api/") or r.path == "/openapi.json")
              for m in (r.methods or ()) if m != "HEAD"}
    described = {(m, p) for p, ops in document(api.ENDPOINTS)["paths"].items() for m in ops}
    assert served == described
    assert len(served) == 26  # 21, and the five settlement reads


async def test_the_openapi_document_is_served_and_says_3_1(rig: ConsoleRig) -> None:
    doc = (await rig.client().get("/api/v1/openapi.json")).json()
    assert doc["openapi"] == "3.1.0"
    assert "/api/v1/escalations/{escalation_id}/resolve-conflict" in doc["paths"]


async def test_htmx_is_served_from_the_console_itself_with_its_recorded_hash(rig: ConsoleRig) -> None:
    served = await rig.client().get("/static/htmx.min.js")
    assert served.status_code == 200
    assert hashlib.sha256(served.content).hexdigest() == HTMX_SHA256
    readme = Path(__file__).parents[2] / "services/console/paycore_console/static/README.md"
    assert HTMX_SHA256 in readme.read_text()
    page = (await rig.client().get("/login")).text
    assert '<script src="/static/htmx.min.js" defer></script>' in page and "://" not in page.split("<body")[0]
