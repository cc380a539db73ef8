"""Stripe's view of the settlement book: balance transactions, charges, the payout CSV.

The book (:mod:`paycore_sandbox.settlements`) holds the Stripe dialect's lines per account and
day; here each line is a BalanceTransaction (``txn_…``, an id fixed per line) and each day's
batch a payout (``po_…``, fixed per account, environment and day):

- ``GET /v1/balance_transactions`` — Stripe's list: ``created[gte|gt|lte|lt]`` (or ``created``)
  unix seconds, ``limit`` 1..100 (10), ``starting_after`` / ``ending_before`` (a txn id; an
  unknown one is 400 ``resource_missing``), ``type``, ``payout`` (the day's ``po_…``),
  ``source`` and ``expand[]=data.source`` (the Charge or Refund object in place of its id);
  newest first; any other parameter is 400. Line → ``type``/``reporting_category``:
  charge → ``charge``/``charge``, refund → ``refund``/``refund``, refund reversal →
  ``refund_failure``/``refund_failure``, fee → ``stripe_fee``/``fee``, adjustment →
  ``adjustment``/``other_adjustment``; a hand-made line's ``stripe_type`` (e.g.
  ``payment_failure_refund``, ``partial_capture_reversal``) is its type. ``source`` is the
  refund (``re_…``) for a refund's lines, else the payment's charge (``ch_…``), else null.
- ``GET /v1/charges/{charge}`` — the Charge of a PaymentIntent that has one
  (``latest_charge``), minimally.
- ``GET /_sandbox/stripe/payout_reconciliation.csv?account=&date=[&environment=]``
  (sandbox-only, a closed day) — the itemized payout reconciliation report
  (``payout_reconciliation.itemized.5`` columns, :data:`PAYOUT_COLUMNS`), amounts in major
  units, currency lower-case; 404 for a day that is not closed or has no lines.

The ``/v1`` GETs are lookups: Stripe's auth, rate limit and request faults (a rule's
``reference`` matches the request's path, as for Cardco's settlements).
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterator
from typing import Any, cast

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from paycore_sandbox import api
from paycore_sandbox.dialects import stripe_after_payment, stripe_api
from paycore_sandbox.dialects import stripe_wire as wire
from paycore_sandbox.errors import ApiError, JSONResponse, not_found
from paycore_sandbox.faults import FaultContext
from paycore_sandbox.movements import Refund
from paycore_sandbox.settings import SandboxAccount
from paycore_sandbox.settlement_api import CSV_MEDIA_TYPE, csv_stream, major
from paycore_sandbox.settlements import Batch, Line
from paycore_sandbox.state import SandboxState

TYPES = {"charge": "charge", "refund": "refund", "refund_reversal": "refund_failure",
         "fee": "stripe_fee", "adjustment": "adjustment"}
CATEGORIES = {"charge": "charge", "refund": "refund", "refund_failure": "refund_failure",
              "stripe_fee": "fee", "adjustment": "other_adjustment",
              "payment_failure_refund": "charge_failure",
              "partial_capture_reversal": "partial_capture_reversal"}
PAYOUT_COLUMNS = (
    "balance_transaction_id", "created_utc", "created", "available_on_utc", "currency", "gross",
    "fee", "net", "reporting_category", "source_id", "description", "customer_facing_amount",
    "customer_facing_currency", "automatic_payout_id", "automatic_payout_effective_at",
    "payment_intent_id", "charge_id", "refund_id", "payment_metadata[paycore_reference]",
    "refund_metadata[paycore_reference]")
_LIST_PARAMS = frozenset({"created", "created[gte]", "created[gt]", "created[lte]",
                          "created[lt]", "limit", "starting_after", "ending_before", "type",
                          "payout", "source", "currency"})
_BOUNDS = {"created[gte]": int.__ge__, "created[gt]": int.__gt__, "created[lte]": int.__le__,
           "created[lt]": int.__lt__, "created": int.__eq__}


def _stable(kind: str, *parts: str) -> str:
    return hashlib.sha256(":".join((kind, *parts)).encode()).hexdigest()[:24]


def txn_id(line: Line) -> str:
    return "txn_" + _stable("txn", line.line_id)


def payout_id(batch: Batch) -> str:
    key = batch.key
    return "po_" + _stable("payout", key.account, key.environment, key.date.isoformat())


def available_on(batch: Batch) -> int:
    """Funds of a day are available at midnight UTC after it."""
    start = dt.datetime.combine(batch.key.date + dt.timedelta(days=1), dt.time(), dt.UTC)
    return int(start.timestamp())


def txn_type(line: Line) -> str:
    return line.type_in(wire.NAME) or TYPES[line.type]


def charge_of(payment_id: str) -> str:
    return "ch_" + payment_id.removeprefix("pi_")


def source_id(line: Line) -> str | None:
    if line.refund:
        return line.refund
    return charge_of(line.payment) if line.payment else None


# -- the transactions ----------------------------------------------------------------------

def _entries(state: SandboxState, account: SandboxAccount) -> list[tuple[Batch, Line]]:
    """The account's Stripe lines, newest first (the book's order reversed within a time)."""
    found = [(batch, line)
             for batch in state.settlements.batches(dialect=wire.NAME, account=account.account,
                                                    environment=account.environment)
             for line in batch.lines()]
    ordered = list(reversed(found))
    ordered.sort(key=lambda pair: pair[1].created, reverse=True)  # stable: ties stay newest first
    return ordered


def _expanded_source(state: SandboxState, account: SandboxAccount, line: Line) -> Any:
    source = source_id(line)
    if source is None:
        return None
    if line.refund:
        refund = state.movements.get(line.refund)
        if isinstance(refund, Refund) and refund.visible_to(account, wire.NAME):
            return stripe_after_payment.refund_object(state, refund)
        return source
    payment = state.ledger.find_for(account, line.payment, wire.NAME)
    return wire.render_charge(payment) if payment is not None else source


def render_txn(state: SandboxState, account: SandboxAccount, batch: Batch, line: Line, *,
               expand: bool) -> dict[str, Any]:
    currency = line.currency.lower()
    kind = txn_type(line)
    description = None
    if line.type == "charge" and line.payment:
        payment = state.ledger.find_for(account, line.payment, wire.NAME)
        description = payment.description if payment is not None else None
    elif line.refund:
        description = "REFUND FOR CHARGE"
    return {
        "id": txn_id(line), "object": "balance_transaction", "amount": line.gross,
        "available_on": available_on(batch), "created": line.created, "currency": currency,
        "description": description, "exchange_rate": None, "fee": line.fee,
        "fee_details": [{"amount": line.fee, "application": None, "currency": currency,
                         "description": "Stripe processing fees", "type": "stripe_fee"}]
        if line.fee else [],
        "net": line.net, "reporting_category": CATEGORIES.get(kind, "other_adjustment"),
        "source": _expanded_source(state, account, line) if expand else source_id(line),
        "status": "available", "type": kind,
    }


def _expand(request: Request) -> bool:
    wanted = [value for name, value in request.query_params.multi_items()
              if name == "expand" or name.startswith("expand[")]
    for value in wanted:
        if value != "data.source":
            raise wire.invalid_request(f"This property cannot be expanded ({value}).",
                                       param="expand")
    return bool(wanted)


def _list(state: SandboxState, account: SandboxAccount, request: Request) -> dict[str, Any]:
    query = request.query_params
    for name in query:
        if name not in _LIST_PARAMS and not (name == "expand" or name.startswith("expand[")):
            raise wire.unknown_parameter(name)
    expand = _expand(request)
    limit_raw = query.get("limit", "10")
    if not limit_raw.isdigit() or not 1 <= int(limit_raw) <= 100:
        raise wire.invalid_request("limit must be an integer between 1 and 100.", param="limit")
    bounds: list[tuple[Any, int]] = []
    for name, compare in _BOUNDS.items():
        if name in query:
            raw = query[name]
            if not raw.lstrip("-").isdigit():
                raise wire.invalid_request(f"Invalid integer: {raw}", param=name)
            bounds.append((compare, int(raw)))
    entries = [(b, line) for b, line in _entries(state, account)
               if all(compare(line.created, value) for compare, value in bounds)
               and query.get("type") in (None, txn_type(line))
               and query.get("payout") in (None, payout_id(b))
               and query.get("source") in (None, source_id(line))
               and query.get("currency") in (None, line.currency.lower())]
    ids = [txn_id(line) for _, line in entries]
    limit = int(limit_raw)
    start, end = 0, len(entries)
    for name in ("starting_after", "ending_before"):
        cursor = query.get(name)
        if cursor is not None and cursor not in ids:
            raise wire.resource_missing("balance_transaction", cursor, name, status=400)
    if query.get("starting_after") is not None:
        start = ids.index(query["starting_after"]) + 1
    if query.get("ending_before") is not None:
        end = ids.index(query["ending_before"])
        start = max(0, end - limit)
    window = entries[start:min(end, start + limit)]
    more = start + limit < end if query.get("ending_before") is None else start > 0
    return {"object": "list", "url": "/v1/balance_transactions", "has_more": more,
            "data": [render_txn(state, account, b, line, expand=expand) for b, line in window]}


async def list_balance_transactions(request: Request) -> Response:
    arrival = await api.arrive(request, stripe_api.authenticate)
    if arrival.account is None:
        return stripe_api.finish(request, cast(Response, arrival.rejection))
    state, account = arrival.state, arrival.account
    ctx = FaultContext(account.account, "lookup", request.url.path, wire.NAME)

    def answer() -> Response:
        try:
            return JSONResponse(_list(state, account, request))
        except ApiError as exc:
            return exc.response()

    response = await api.rate_limited_lookup(request, arrival, ctx, answer, answers=wire.ANSWERS)
    return stripe_api.finish(request, response)


async def retrieve_charge(request: Request) -> Response:
    arrival = await api.arrive(request, stripe_api.authenticate)
    if arrival.account is None:
        return stripe_api.finish(request, cast(Response, arrival.rejection))
    state, account = arrival.state, arrival.account
    charge = request.path_params["charge"]
    ctx = FaultContext(account.account, "lookup", request.url.path, wire.NAME)

    def answer() -> Response:
        payment = state.ledger.find_for(account, "pi_" + charge.removeprefix("ch_"), wire.NAME)
        if payment is None or not charge.startswith("ch_") \
                or wire.render_intent(payment)["latest_charge"] != charge:
            return wire.resource_missing("charge", charge, "id").response()
        return JSONResponse(wire.render_charge(payment))

    response = await api.rate_limited_lookup(request, arrival, ctx, answer, answers=wire.ANSWERS)
    return stripe_api.finish(request, response)


# -- the itemized payout reconciliation report ---------------------------------------------

def _when(unix: int) -> str:
    return dt.datetime.fromtimestamp(unix, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _payout_rows(state: SandboxState, batch: Batch) -> Iterator[list[str]]:
    for line in batch.lines():
        currency = line.currency.lower()
        payment = state.ledger.get(line.payment) if line.payment else None
        refund = state.movements.get(line.refund) if line.refund else None
        metadata = payment.dialect_data.get("metadata", {}) if payment is not None else {}
        kind = txn_type(line)
        facing = major(abs(line.gross), line.currency) if line.payment else ""
        yield [txn_id(line), _when(line.created), _when(line.created),
               _when(available_on(batch)), currency, major(line.gross, line.currency),
               major(line.fee, line.currency), major(line.net, line.currency),
               CATEGORIES.get(kind, "other_adjustment"), source_id(line) or "",
               "REFUND FOR CHARGE" if line.refund else "",
               facing, currency if facing else "", payout_id(batch),
               _when(available_on(batch)), line.payment,
               charge_of(line.payment) if line.payment else "", line.refund,
               str(metadata.get("paycore_reference", "")),
               refund.reference if refund is not None else ""]


async def payout_reconciliation(request: Request) -> Response:
    sandbox = api.sandbox_of(request)
    query = request.query_params
    account, day = query.get("account", ""), query.get("date", "")
    try:
        date = dt.date.fromisoformat(day)
    except ValueError:
        raise ApiError(422, "invalid_request", "parameter_invalid", "date must be YYYY-MM-DD.",
                       param="date") from None
    batch = next((b for b in sandbox.state.settlements.batches(
        dialect=wire.NAME, account=account, environment=query.get("environment", "test"))
        if b.key.date == date), None)
    if batch is None or not batch.closed or not batch.visible:
        raise not_found(f"No closed Stripe payout day {day} for {account}.")
    return StreamingResponse(csv_stream(PAYOUT_COLUMNS, _payout_rows(sandbox.state, batch),
                                        batch.raw_suffix), media_type=CSV_MEDIA_TYPE)
