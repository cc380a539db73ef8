"""The Cardco ``/v1`` API: create a payment, look payments up, and what every
Cardco endpoint shares (arrival, idempotent POSTs, rate-limited lookups).

Order of checks on every request: capture, authenticate (401/403), version
(400), faults (see :mod:`paycore_sandbox.transport`), then the real work.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

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
    RequestOperation,
)
from paycore_sandbox.idempotency import (
    Claim,
    KeyRecord,
    StoredResponse,
    fingerprint,
    parse_idempotency_key,
)
from paycore_sandbox.movements import Movement
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


# -- idempotent POSTs -----------------------------------------------------------

@dataclass(frozen=True)
class PostCall:
    """Everything a POST needs, detached from the HTTP request (a late arrival
    processes it after the request is gone)."""

    account: SandboxAccount
    key_header: str | None
    body: Any
    target: str | None = None  # the payment id in the path, if any


@dataclass(frozen=True)
class Executed:
    """What an executed POST answers, and what its execution faults match."""

    status: int
    body: dict[str, Any]
    reference: str


Req = TypeVar("Req")


@dataclass(frozen=True)
class IdempotentPost(Generic[Req]):
    """One ``POST /v1`` endpoint under the contract's idempotency rules.

    ``validate`` raises :class:`ApiError` for a request rejected before execution
    (400, the key not stored); ``execute`` does the work (no await: it must not be
    interleaved with another request's checks) and raises :class:`ApiError` when
    its rules refuse it, nothing done (400 or 404, the key not stored either).
    """

    endpoint: str  # the key scope: each endpoint has its own keys
    operation: RequestOperation  # what fault rules match
    ok_status: int  # what malformed_body/empty_body answer
    validate: Callable[[PostCall], Req]
    execute: Callable[[Sandbox, SandboxState, SandboxAccount, Req, str], Executed]


async def idempotent_post(request: Request, post: IdempotentPost[Req],
                          target: str | None = None) -> Response:
    arrival = await arrive(request)
    if arrival.account is None:
        return cast(Response, arrival.rejection)
    sandbox, state, account = arrival.sandbox, arrival.state, arrival.account
    body = parse_json(await request.body())
    call = PostCall(account, request.headers.get("idempotency-key"), body, target)
    ctx = FaultContext(account.account, post.operation, reference_of(body))

    async def process(delay_s: float) -> Response:
        return await _process_post(sandbox, state, post, call, delay_s)

    return await with_faults(request, sandbox, state, arrival.entry, ctx, process,
                             ok_status=post.ok_status)


async def _process_post(sandbox: Sandbox, state: SandboxState, post: IdempotentPost[Req],
                        call: PostCall, delay_s: float) -> Response:
    try:
        key = parse_idempotency_key(call.key_header)
        req = post.validate(call)
    except ApiError as exc:  # rejected before execution: nothing stored
        await state.gate.sleep(delay_s)
        return exc.response()
    scope = (call.account.account, call.account.environment, post.endpoint)
    # The payment in the path is part of what the key stands for (the body alone is
    # the fingerprint where there is none, as it always was for POST /v1/payments).
    signed = call.body if call.target is None else {"payment": call.target, "body": call.body}
    claim, record = await state.keys.claim(scope, key, fingerprint(signed),
                                           sandbox.clock.now())
    if claim is Claim.FRESH:
        # Execution runs as its own task: a client that disconnects (cancelling
        # this handler) must not interrupt it half-way.
        task = sandbox.spawn(_execute(sandbox, state, post, record, call.account, req, key,
                                      delay_s), survives_reset=True)
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


async def _execute(sandbox: Sandbox, state: SandboxState, post: IdempotentPost[Req],
                   record: KeyRecord, account: SandboxAccount, req: Req, key: str,
                   delay_s: float) -> Response:
    try:
        done = post.execute(sandbox, state, account, req, key)
    except ApiError as exc:  # refused by the endpoint's rules: nothing done, nothing stored
        state.keys.abandon(record)
        await state.gate.sleep(delay_s)
        return exc.response()
    except BaseException:
        state.keys.abandon(record)  # nothing happened: nothing to replay
        raise
    ctx = FaultContext(account.account, post.operation, done.reference)
    if state.faults.take(ctx, EXECUTION_FAULTS) is not None:
        stored = StoredResponse.of_error(internal())
    else:
        stored = StoredResponse(done.status, orjson.dumps(done.body))
    try:
        await state.gate.sleep(delay_s)  # a `delay` fault answers late, the key in progress
    finally:
        state.keys.complete(record, stored)
    return stored.to_response(replayed=False)


# -- POST /v1/payments ---------------------------------------------------------

def _create(sandbox: Sandbox, state: SandboxState, account: SandboxAccount,
            req: CreateRequest, key: str) -> Executed:
    payment = lifecycle.create_payment(sandbox, state, account, req, key)
    return Executed(req.outcome.http_status, payment.to_public(), req.reference)


CREATE = IdempotentPost("/v1/payments", "create", 201,
                        lambda call: validate_create(call.body), _create)


async def create_payment(request: Request) -> Response:
    return await idempotent_post(request, CREATE)


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
        if payment is None or stale(state, account, payment.reference):
            return not_found(f"No such payment: {payment_id}").response()
        return JSONResponse(payment.to_public())

    return await rate_limited_lookup(request, arrival, ctx, answer)


def stale(state: SandboxState, account: SandboxAccount, reference: str) -> bool:
    """Whether a ``lookup_stale`` rule hides an existing object (a payment, capture or
    refund, by its reference) from a by-id lookup."""
    ctx = FaultContext(account.account, "lookup", reference)
    return state.faults.take(ctx, STALE_LOOKUP_FAULTS) is not None


def unindexed(state: SandboxState, account: SandboxAccount, reference: str) -> bool:
    """Whether a ``search_stale`` rule hides an existing object (by its reference) from a
    lookup by reference."""
    ctx = FaultContext(account.account, "lookup", reference)
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
        indexed = [p for p in found if not unindexed(state, account, p.reference)]
        return JSONResponse({"data": [p.to_public() for p in indexed]})

    return await rate_limited_lookup(request, arrival, ctx, answer)


# Captures and refunds are looked up alike (GET /v1/refunds/{id}, GET /v1/refunds?...,
# GET /v1/captures?...); the faults match the object's reference, as for payments.

def _movement_for(state: SandboxState, account: SandboxAccount, kind: type[Movement],
                  movement_id: str) -> Movement | None:
    found = state.movements.get(movement_id)
    return found if isinstance(found, kind) and found.visible_to(account) else None


async def get_movement(request: Request, kind: type[Movement]) -> Response:
    """``GET`` of one capture or refund (``kind``) by its id: 200, or 404."""
    arrival = await arrive(request)
    if arrival.account is None:
        return cast(Response, arrival.rejection)
    sandbox, state, account = arrival.sandbox, arrival.state, arrival.account
    movement_id = request.path_params["movement_id"]
    lifecycle.sweep(state, sandbox.clock.now())
    found = _movement_for(state, account, kind, movement_id)
    ctx = FaultContext(account.account, "lookup", found.reference if found else None)

    def answer() -> Response:
        movement = _movement_for(state, account, kind, movement_id)
        if movement is None or stale(state, account, movement.reference):
            return not_found(f"No such {kind.object_name}: {movement_id}").response()
        return JSONResponse(movement.to_public())

    return await rate_limited_lookup(request, arrival, ctx, answer)


async def list_movements(request: Request, kind: type[Movement]) -> Response:
    """``GET`` of the captures or refunds (``kind``) of ``?payment=`` and/or with
    ``?reference=`` (both: both must match), oldest first."""
    arrival = await arrive(request)
    if arrival.account is None:
        return cast(Response, arrival.rejection)
    state, account = arrival.state, arrival.account
    payment_id = request.query_params.get("payment") or None
    reference = request.query_params.get("reference") or None
    # A list by payment is about no one reference: only rules without one match it.
    ctx = FaultContext(account.account, "lookup", reference)

    def answer() -> Response:
        if payment_id is None and reference is None:
            return invalid_param("payment", "Give the payment or the reference query "
                                 "parameter.").response()
        found = state.movements.by_reference(reference) if reference is not None \
            else state.movements.of_payment(str(payment_id))
        rows = [m for m in found if isinstance(m, kind) and m.visible_to(account)
                and payment_id in (None, m.payment_id) and reference in (None, m.reference)
                and not unindexed(state, account, m.reference)]
        return JSONResponse({"data": [m.to_public() for m in rows]})

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
