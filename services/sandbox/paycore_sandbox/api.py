"""The Cardco ``/v1`` API: create a payment, look payments up.

Order of checks on every request: capture, authenticate (401/403), version
(400), faults (see :mod:`paycore_sandbox.transport`), then the real work.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import orjson
from starlette.requests import Request
from starlette.responses import Response

from paycore_sandbox import lifecycle
from paycore_sandbox.capture import CapturedRequest
from paycore_sandbox.errors import (
    CARDCO_ANSWERS,
    ApiError,
    FaultAnswers,
    JSONResponse,
    forbidden,
    internal,
    invalid_param,
    not_found,
    unauthorized,
)
from paycore_sandbox.faults import (
    EXECUTION_FAULTS,
    STALE_LOOKUP_FAULTS,
    STALE_SEARCH_FAULTS,
    FaultContext,
)
from paycore_sandbox.idempotency import (
    Claim,
    KeyRecord,
    StoredResponse,
    fingerprint,
    parse_idempotency_key,
)
from paycore_sandbox.ledger import Payment
from paycore_sandbox.settings import SandboxAccount, SandboxSettings
from paycore_sandbox.state import Sandbox, SandboxState
from paycore_sandbox.transport import with_faults
from paycore_sandbox.validation import CreateRequest, parse_json, reference_of, validate_create

API_VERSION = "2026-11-01"


def sandbox_of(request: Request) -> Sandbox:
    return cast(Sandbox, request.app.state.sandbox)


def authenticate(request: Request, settings: SandboxSettings) -> SandboxAccount:
    scheme, _, api_key = request.headers.get("authorization", "").partition(" ")
    account = settings.account_for_key(api_key.strip()) if scheme == "Bearer" else None
    if account is None:
        raise unauthorized("Invalid or missing API key.")
    if request.headers.get("cardco-account") != account.account:
        raise forbidden("The API key does not belong to the account in Cardco-Account.")
    if request.headers.get("cardco-version") != API_VERSION:
        raise ApiError(400, "invalid_request", "version_invalid",
                       f"Cardco-Version must be {API_VERSION}.")
    return account


@dataclass(frozen=True)
class Arrival:
    sandbox: Sandbox
    state: SandboxState
    entry: CapturedRequest
    account: SandboxAccount | None
    rejection: Response | None


Authenticate = Callable[[Request, SandboxSettings], SandboxAccount]


async def arrive(request: Request, auth: Authenticate = authenticate) -> Arrival:
    """Capture the request, then authenticate it (``auth``: the dialect's rule)."""
    sandbox = sandbox_of(request)
    state = sandbox.state
    body = await request.body()
    entry = state.requests.record(request, body, sandbox.clock.now())
    try:
        account = auth(request, sandbox.settings)
    except ApiError as exc:
        entry.processed(exc.status, False)
        return Arrival(sandbox, state, entry, None, exc.response())
    return Arrival(sandbox, state, entry, account, None)


# -- POST /v1/payments ---------------------------------------------------------

@dataclass(frozen=True)
class CreateCall:
    """Everything a create needs, detached from the HTTP request (a late
    arrival processes it after the request is gone)."""

    account: SandboxAccount
    key_header: str | None
    body: Any


async def create_payment(request: Request) -> Response:
    arrival = await arrive(request)
    if arrival.account is None:
        return cast(Response, arrival.rejection)
    sandbox, state, account = arrival.sandbox, arrival.state, arrival.account
    body = parse_json(await request.body())
    call = CreateCall(account, request.headers.get("idempotency-key"), body)
    ctx = FaultContext(account.account, "create", reference_of(body))

    async def process(delay_s: float) -> Response:
        return await _process_create(sandbox, state, call, delay_s)

    return await with_faults(request, sandbox, state, arrival.entry, ctx, process,
                             ok_status=201)


async def _process_create(sandbox: Sandbox, state: SandboxState, call: CreateCall,
                          delay_s: float) -> Response:
    try:
        key = parse_idempotency_key(call.key_header)
        req = validate_create(call.body)
    except ApiError as exc:  # rejected before execution: nothing stored
        await state.gate.sleep(delay_s)
        return exc.response()
    scope = (call.account.account, call.account.environment)
    claim, record = await state.keys.claim(scope, key, fingerprint(call.body),
                                           sandbox.clock.now())
    if claim is Claim.FRESH:
        # Execution runs as its own task: a client that disconnects (cancelling
        # this handler) must not interrupt a payment half-way.
        task = sandbox.spawn(_execute(sandbox, state, record, call.account, req, key, delay_s),
                             survives_reset=True)
        return cast(Response, await asyncio.shield(task))
    if claim is Claim.MISMATCH:
        response = ApiError(422, "idempotency_error", "key_reused",
                            "This Idempotency-Key was used with a different request body."
                            ).response()
    elif claim is Claim.IN_PROGRESS:
        response = ApiError(409, "idempotency_error", "request_in_progress",
                            "A request with this Idempotency-Key is still executing.",
                            headers={"Retry-After": "1"}).response()
    else:
        assert record.response is not None
        response = record.response.to_response(replayed=True)
    await state.gate.sleep(delay_s)
    return response


async def _execute(sandbox: Sandbox, state: SandboxState, record: KeyRecord,
                   account: SandboxAccount, req: CreateRequest, key: str,
                   delay_s: float) -> Response:
    payment: Payment | None = None
    stored: StoredResponse | None = None
    try:
        payment = lifecycle.create_payment(sandbox, state, account, req, key)
        record.payment_id = payment.id
        ctx = FaultContext(account.account, "create", req.reference)
        if state.faults.take(ctx, EXECUTION_FAULTS) is not None:
            stored = StoredResponse.of_error(internal())
        else:
            stored = StoredResponse(req.outcome.http_status, orjson.dumps(payment.to_public()))
        # A `delay` fault answers late with the key still in progress.
        await state.gate.sleep(delay_s)
    except BaseException:
        if payment is None:
            state.keys.abandon(record)  # nothing happened: nothing to replay
        else:
            state.keys.complete(record, stored or StoredResponse.of_error(internal()))
        raise
    state.keys.complete(record, stored)
    return stored.to_response(replayed=False)


# -- lookups -----------------------------------------------------------------

async def get_payment(request: Request) -> Response:
    arrival = await arrive(request)
    if arrival.account is None:
        return cast(Response, arrival.rejection)
    sandbox, state, account = arrival.sandbox, arrival.state, arrival.account
    payment_id = request.path_params["payment_id"]
    lifecycle.sweep(state, sandbox.clock.now())
    found = state.ledger.find_for(account, payment_id)
    ctx = FaultContext(account.account, "lookup", found.reference if found else None)

    def answer() -> Response:
        payment = state.ledger.find_for(account, payment_id)
        if payment is None or _stale(state, account, payment):
            return not_found(f"No such payment: {payment_id}").response()
        return JSONResponse(payment.to_public())

    return await rate_limited_lookup(request, arrival, ctx, answer)


def _stale(state: SandboxState, account: SandboxAccount, payment: Payment) -> bool:
    """Whether a ``lookup_stale`` rule hides this existing payment from a by-id lookup."""
    ctx = FaultContext(account.account, "lookup", payment.reference)
    return state.faults.take(ctx, STALE_LOOKUP_FAULTS) is not None


def _unindexed(state: SandboxState, account: SandboxAccount, payment: Payment) -> bool:
    """Whether a ``search_stale`` rule hides this existing payment from a lookup by reference."""
    ctx = FaultContext(account.account, "lookup", payment.reference)
    return state.faults.take(ctx, STALE_SEARCH_FAULTS) is not None


async def list_payments(request: Request) -> Response:
    arrival = await arrive(request)
    if arrival.account is None:
        return cast(Response, arrival.rejection)
    state, account = arrival.state, arrival.account
    reference = request.query_params.get("reference")
    ctx = FaultContext(account.account, "lookup", reference)

    def answer() -> Response:
        if not reference:
            return invalid_param("reference", "The reference query parameter is required."
                                 ).response()
        found = state.ledger.by_reference(account, reference)
        indexed = [p for p in found if not _unindexed(state, account, p)]
        return JSONResponse({"data": [p.to_public() for p in indexed]})

    return await rate_limited_lookup(request, arrival, ctx, answer)


async def rate_limited_lookup(request: Request, arrival: Arrival, ctx: FaultContext,
                              answer: Callable[[], Response], *,
                              answers: FaultAnswers = CARDCO_ANSWERS) -> Response:
    """A lookup behind the account's rate limit and every request fault.

    ``answers`` renders the rate limit and fault errors in the dialect's shape.
    """
    sandbox, state, account = arrival.sandbox, arrival.state, arrival.account
    assert account is not None

    async def process(delay_s: float) -> Response:
        wait_s = state.bucket(account).take()
        if wait_s:
            response = answers.rate_limited(wait_s).response()
        elif state.faults.take(ctx, EXECUTION_FAULTS) is not None:
            response = answers.internal().response()
        else:
            lifecycle.sweep(state, sandbox.clock.now())
            response = answer()
        await state.gate.sleep(delay_s)
        return response

    return await with_faults(request, sandbox, state, arrival.entry, ctx, process,
                             ok_status=200, answers=answers)
