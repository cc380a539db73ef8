"""Control endpoints under ``/_sandbox/`` (no auth: the CLI binds to loopback).

Contract endpoints: ``GET /_sandbox/payments``, ``POST|DELETE /_sandbox/faults``,
``POST /_sandbox/clock``, ``POST /_sandbox/payments/{id}/action``,
``POST /_sandbox/payments/{id}/refund``, ``POST /_sandbox/refunds/{id}/fail``.

Sandbox extensions for captures and refunds: ``POST /_sandbox/refunds/{id}/settle``
and ``POST /_sandbox/captures/{id}/settle`` (``{"result", "failure_reason"?}``: a
pending one becomes ``succeeded``, ``failed`` or, a refund only, ``canceled``, as
``/action`` completes a pending payment), ``GET /_sandbox/refunds`` and
``GET /_sandbox/captures`` (every one ever made, with its idempotency key).

Sandbox extensions for tests: ``GET /_sandbox/faults`` (active rules),
``POST /_sandbox/late-arrivals/release`` (every ``late_arrival`` request still waiting
lands now: a test chooses the moment instead of racing the delay),
``GET /_sandbox/clock``, ``POST /_sandbox/reset`` (forget everything, release
held requests), ``GET /_sandbox/requests`` (every ``/v1`` request, in arrival
order, Authorization reduced to ``sk_test``/``sk_live``) and
``GET /_sandbox/events`` (webhook events generated so far; ``?payment=`` filters),
``GET /_sandbox/accounts`` (every account with each dialect's dev credentials).
Beyond the contract's faults, ``POST /_sandbox/faults`` also accepts the
``account``/``operation`` match keys and the ``lookup_stale`` fault (a by-id
lookup of an existing payment answers 404 as if it did not exist, as a lagging
read replica would; by-reference lookups are unaffected) and the ``search_stale``
fault (a by-reference lookup leaves the payment out, as a search index that has
not caught up would; by-id lookups are unaffected); see :mod:`paycore_sandbox.faults`.

Webhook delivery (sandbox extensions): ``GET|POST|DELETE /_sandbox/webhooks/endpoints``
(``GET``: every endpoint, as ``url`` for Cardco and ``<dialect>=<url>`` else;
``GET ?dialect=``: that dialect's URLs; ``POST {"url", "dialect"?}`` answers the
URLs of the dialect it added to), ``GET /_sandbox/webhooks/deliveries`` (every
attempt, in order; never a signature or secret), ``GET /_sandbox/webhooks/pending``,
``POST /_sandbox/webhooks/events/{event_id}/redeliver`` and
``POST /_sandbox/webhooks/batch {"events": [ids]}`` (several events in one
delivery, for a dialect that batches: Adyen).

Settlements (sandbox extensions; handlers in :mod:`paycore_sandbox.settlement_control`, the
book in :mod:`paycore_sandbox.settlements`): ``GET /_sandbox/settlements``,
``POST /_sandbox/settlements/close {"date", "account"?, "dialect"?, "environment"?}``,
``POST /_sandbox/settlements/lines {"account", "date", "dialect"?, "lines": [line |
{"suppress": id} | {"duplicate": id}]}``, ``POST /_sandbox/settlements/raw {"account",
"date", "csv_suffix" | "csv_suffix_b64"}``, ``POST /_sandbox/settlements/totals {"account",
"date", "gross"?, "fees"?, "net"?}`` (422 for bad input, 409 for a closed batch), and
``GET /_sandbox/stripe/payout_reconciliation.csv?account=&date=`` (Stripe's itemized payout
CSV of a closed day). ``POST /_sandbox/reset`` forgets the book too.
"""

from __future__ import annotations

import math
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from paycore_sandbox import after_payment, lifecycle
from paycore_sandbox.api import sandbox_of
from paycore_sandbox.dialects import DEFAULT_DIALECT, DIALECT_NAMES, Endpoint, dialect_named
from paycore_sandbox.errors import ApiError, JSONResponse, invalid_param, not_found
from paycore_sandbox.faults import parse_rules
from paycore_sandbox.ledger import Payment
from paycore_sandbox.movements import Capture, Movement, Refund
from paycore_sandbox.settings import webhook_url_problem
from paycore_sandbox.state import Sandbox
from paycore_sandbox.validation import parse_json


def _fresh(request: Request) -> Sandbox:
    """The sandbox, with time-driven changes applied (reads are never stale)."""
    sandbox = sandbox_of(request)
    lifecycle.sweep(sandbox.state, sandbox.clock.now())
    return sandbox


async def _json_object(request: Request, *, optional: bool = False) -> dict[str, Any]:
    raw = await request.body()
    if optional and not raw.strip():
        return {}
    body = parse_json(raw)
    if not isinstance(body, dict):
        raise invalid_param(None, "The request body must be a JSON object.")
    return body


def _payment(sandbox: Sandbox, request: Request) -> Payment:
    payment_id = request.path_params["payment_id"]
    payment = sandbox.state.ledger.get(payment_id)
    if payment is None:
        raise not_found(f"No such payment: {payment_id}")
    return payment


async def ledger(request: Request) -> Response:
    sandbox = _fresh(request)
    filters = {k: v for k, v in request.query_params.items()
               if k in ("account", "environment", "reference", "idempotency_key")}
    rows = [p.to_ledger() for p in sandbox.state.ledger]
    rows = [r for r in rows if all(r[k] == v for k, v in filters.items())]
    return JSONResponse({"data": rows})


async def add_faults(request: Request) -> Response:
    sandbox = sandbox_of(request)
    rules = parse_rules(await _json_object(request))
    sandbox.state.faults.add(rules)
    return await list_faults(request)


async def list_faults(request: Request) -> Response:
    rules = sandbox_of(request).state.faults.rules()
    return JSONResponse({"rules": [r.to_json() for r in rules]})


async def clear_faults(request: Request) -> Response:
    sandbox_of(request).state.faults.clear()
    return JSONResponse({"rules": []})


async def release_late_arrivals(request: Request) -> Response:
    """Every ``late_arrival`` request still waiting lands now, whatever its delay."""
    sandbox_of(request).state.late_arrivals.release_all()
    return JSONResponse({"released": True})


async def advance_clock(request: Request) -> Response:
    sandbox = sandbox_of(request)
    seconds = (await _json_object(request)).get("advance_seconds")
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) \
            or not math.isfinite(seconds) or seconds < 0:
        raise invalid_param("advance_seconds", "advance_seconds must be a number >= 0.")
    sandbox.clock.advance(seconds)
    return await get_clock(request)


async def get_clock(request: Request) -> Response:
    sandbox = _fresh(request)
    return JSONResponse({"now": sandbox.clock.now(), "offset_s": sandbox.clock.offset_s})


async def payment_action(request: Request) -> Response:
    sandbox = sandbox_of(request)
    result = (await _json_object(request)).get("result")
    if result not in ("succeeded", "failed"):
        raise invalid_param("result", "result must be 'succeeded' or 'failed'.")
    payment = _payment(sandbox, request)
    lifecycle.complete_action(sandbox.state, sandbox.clock.now(), payment, result)
    return JSONResponse(dialect_named(payment.dialect).render_payment(payment))


async def payment_refund(request: Request) -> Response:
    sandbox = _fresh(request)
    amount = (await _json_object(request, optional=True)).get("amount")
    if amount is not None and (isinstance(amount, bool) or not isinstance(amount, int)):
        raise invalid_param("amount", "amount must be an integer in minor units.")
    payment = _payment(sandbox, request)
    lifecycle.refund(sandbox.state, payment, amount)
    return JSONResponse(dialect_named(payment.dialect).render_payment(payment))


def _movement(sandbox: Sandbox, request: Request, kind: type[Movement]) -> Movement:
    movement_id = request.path_params["movement_id"]
    movement = sandbox.state.movements.get(movement_id)
    if not isinstance(movement, kind):
        raise not_found(f"No such {kind.object_name}: {movement_id}")
    return movement


def _failure_reason(body: dict[str, Any], default: str | None) -> str | None:
    reason = body.get("failure_reason", default)
    if reason is not None and (not isinstance(reason, str) or not reason):
        raise invalid_param("failure_reason", "failure_reason must be a non-empty string.")
    return reason


async def refund_fail(request: Request) -> Response:
    """A succeeded refund comes back failed (a closed card): ``refund.failed``."""
    sandbox = _fresh(request)
    body = await _json_object(request, optional=True)
    reason = _failure_reason(body, after_payment.DEFAULT_REFUND_FAILURE)
    refund = _movement(sandbox, request, Refund)
    assert isinstance(refund, Refund) and reason is not None
    after_payment.fail_refund(sandbox.state, refund, reason)
    return JSONResponse(refund.to_public())


async def _settle(request: Request, kind: type[Movement], results: tuple[str, ...]) -> Response:
    sandbox = _fresh(request)
    body = await _json_object(request)
    result = body.get("result")
    if result not in results:
        raise invalid_param("result", f"result must be one of {', '.join(results)}.")
    reason = _failure_reason(body, None)
    movement = _movement(sandbox, request, kind)
    after_payment.settle(sandbox.state, movement, result, reason)
    return JSONResponse(movement.to_public())


async def refund_settle(request: Request) -> Response:
    return await _settle(request, Refund, ("succeeded", "failed", "canceled"))


async def capture_settle(request: Request) -> Response:
    return await _settle(request, Capture, ("succeeded", "failed"))


async def _movements(request: Request, kind: type[Movement]) -> Response:
    sandbox = _fresh(request)
    filters = {k: v for k, v in request.query_params.items()
               if k in ("account", "environment", "payment", "reference", "idempotency_key")}
    rows = [m.to_ledger() for m in sandbox.state.movements if isinstance(m, kind)]
    rows = [r for r in rows if all(r[k] == v for k, v in filters.items())]
    return JSONResponse({"data": rows})


async def refunds(request: Request) -> Response:
    return await _movements(request, Refund)


async def captures(request: Request) -> Response:
    return await _movements(request, Capture)


async def reset(request: Request) -> Response:
    sandbox_of(request).reset()
    return JSONResponse({"reset": True})


async def captured_requests(request: Request) -> Response:
    entries = sandbox_of(request).state.requests.all()
    return JSONResponse({"data": [e.to_json() for e in entries]})


async def events(request: Request) -> Response:
    sandbox = _fresh(request)
    found = sandbox.state.events.events(request.query_params.get("payment"))
    return JSONResponse({"data": [e.to_json() for e in found]})


def _dialect(value: object) -> str:
    if value not in DIALECT_NAMES:
        raise invalid_param("dialect", f"dialect must be one of {', '.join(DIALECT_NAMES)}.")
    assert isinstance(value, str)
    return value


async def list_endpoints(request: Request) -> Response:
    """Every endpoint: Cardco's as bare URLs (as before dialects), others as
    ``<dialect>=<url>``; with ``?dialect=``, that dialect's URLs only."""
    webhooks = sandbox_of(request).state.webhooks
    if "dialect" in request.query_params:
        dialect = _dialect(request.query_params["dialect"])
        return JSONResponse({"data": webhooks.endpoints_for(dialect)})
    return JSONResponse({"data": [e.spec for e in webhooks.endpoints]})


async def add_endpoint(request: Request) -> Response:
    """``{"url", "dialect"?}`` (default cardco); answers that dialect's URLs."""
    sandbox = sandbox_of(request)
    body = await _json_object(request)
    url = body.get("url")
    problem = webhook_url_problem(url)
    if problem is not None:
        raise invalid_param("url", f"url {problem}.")
    dialect = _dialect(body.get("dialect", DEFAULT_DIALECT))
    assert isinstance(url, str)
    sandbox.state.webhooks.add_endpoint(Endpoint(url, dialect))
    return JSONResponse({"data": sandbox.state.webhooks.endpoints_for(dialect)})


async def clear_endpoints(request: Request) -> Response:
    sandbox_of(request).state.webhooks.clear_endpoints()
    return JSONResponse({"data": []})


async def webhook_deliveries(request: Request) -> Response:
    webhooks = sandbox_of(request).state.webhooks
    found = webhooks.attempts(event_id=request.query_params.get("event"),
                              payment_id=request.query_params.get("payment"))
    return JSONResponse({"data": found})


async def webhook_pending(request: Request) -> Response:
    return JSONResponse({"pending": sandbox_of(request).state.webhooks.pending()})


async def redeliver_event(request: Request) -> Response:
    sandbox = sandbox_of(request)
    event_id = request.path_params["event_id"]
    event = sandbox.state.events.get(event_id)
    if event is None:
        raise not_found(f"No such event: {event_id}")
    started = sandbox.state.webhooks.redeliver(event)
    return JSONResponse({"event": event_id, "deliveries": started})


async def batch_events(request: Request) -> Response:
    """``{"events": [event ids]}``: one delivery carrying them all (a dialect that
    batches notifications, e.g. Adyen; one account) to every endpoint of that dialect."""
    sandbox = _fresh(request)
    ids = (await _json_object(request)).get("events")
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        raise invalid_param("events", "events must be a non-empty list of event ids.")
    found = []
    for event_id in ids:
        event = sandbox.state.events.get(event_id)
        if event is None:
            raise not_found(f"No such event: {event_id}")
        found.append(event)
    try:
        started = sandbox.state.webhooks.batch(found)
    except ValueError as exc:
        raise invalid_param("events", str(exc)) from None
    return JSONResponse({"events": ids, "deliveries": started})


async def accounts(request: Request) -> Response:
    """Every account with its dev credentials, and each dialect's under its name
    (``cardco``, ``stripe``: the same key and ``whsec_`` secret; ``adyen``: merchant account,
    api key, HMAC key, basic-auth user and password)."""
    rows = [{"account": a.account, "environment": a.environment, "api_key": a.api_key,
             "webhook_secret": a.webhook_secret,
             **{name: dialect_named(name).credentials(a) for name in DIALECT_NAMES}}
            for a in sandbox_of(request).settings.accounts]
    return JSONResponse({"data": rows})


async def api_error_handler(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return exc.response()
