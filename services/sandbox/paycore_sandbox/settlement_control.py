"""The settlement controls under ``/_sandbox/settlements`` (sandbox-only; see control.py).

Every body names a batch by ``account``, ``date`` (``YYYY-MM-DD``), and optionally
``dialect`` (``cardco`` default, ``stripe``, ``adyen``: whose report the batch is) and
``environment`` (``test`` default). Bad input is 422 in the sandbox's error shape
(``{"error": {"type": "invalid_request", "code": "parameter_invalid", "param", …}}``); a
change to a closed batch is 409 ``settlement_closed`` (a closed batch never changes).

- ``GET /_sandbox/settlements[?account=&dialect=&environment=]`` → ``{"data": [batch]}``:
  every batch, open or closed, with its lines' count and header totals.
- ``POST /_sandbox/settlements/close {"date", "account"?, "dialect"?, "environment"?}`` →
  ``{"data": [batch]}``: closes the matching batches of that date (every account and
  dialect unless narrowed); an Adyen batch with lines takes its batch number then.
- ``POST /_sandbox/settlements/lines {"account", "date", "lines": [...]}`` adds hand-made
  lines: ``{"type", "payment"?, "refund"?, "capture"?, "reference"?, "currency", "gross",
  "fee"?, "net"?, "created"?, "adyen_type"?, "stripe_type"?}`` (``fee`` 0, ``net`` gross −
  fee, ``created`` now or noon of the batch's day, unix seconds or ISO-8601), or
  ``{"suppress": id}`` (a payment, capture or refund id: its derived lines leave the batch),
  or ``{"duplicate": id}`` (its derived lines appear once more, right after themselves, with
  ``_dup<n>`` ids). ``adyen_type`` alone (e.g. ``Chargeback``) makes an ``adjustment``.
- ``POST /_sandbox/settlements/raw {"account", "date", "csv_suffix" | "csv_suffix_b64"}``:
  bytes appended verbatim to the batch's CSV reports (Cardco's lines, Adyen's report,
  Stripe's payout CSV), for tests of malformed input.
- ``POST /_sandbox/settlements/totals {"account", "date", "gross"?, "fees"?, "net"?}``: the
  header's totals (Cardco's batch, Adyen's payout line) say these instead of the sums.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from paycore_sandbox.api import sandbox_of
from paycore_sandbox.dialects import DEFAULT_DIALECT, DIALECT_NAMES
from paycore_sandbox.errors import ApiError, JSONResponse
from paycore_sandbox.settlement_api import batch_json
from paycore_sandbox.settlements import LINE_TYPES, Batch, BatchKey, Line, LineType, day_of
from paycore_sandbox.state import Sandbox
from paycore_sandbox.validation import parse_json

_LINE_FIELDS = frozenset({"type", "payment", "refund", "capture", "reference", "currency",
                          "gross", "fee", "net", "created", "adyen_type", "stripe_type"})


def bad(param: str, message: str) -> ApiError:
    return ApiError(422, "invalid_request", "parameter_invalid", message, param=param)


def control_json(batch: Batch) -> dict[str, Any]:
    """The control view: Cardco's batch object plus which report it is and its state."""
    return {**batch_json(batch), "dialect": batch.key.dialect,
            "environment": batch.key.environment, "number": batch.number,
            "closed_at": batch.closed_at, "line_totals": vars(batch.line_sums())}


async def _body(request: Request) -> dict[str, Any]:
    body = parse_json(await request.body())
    if not isinstance(body, dict):
        raise bad("body", "The request body must be a JSON object.")
    return body


def _text(body: dict[str, Any], name: str, default: str | None = None) -> str:
    value = body.get(name, default)
    if not isinstance(value, str) or not value:
        raise bad(name, f"{name} must be a non-empty string.")
    return value


def _date(body: dict[str, Any]) -> dt.date:
    raw = _text(body, "date")
    try:
        if len(raw) == 10:
            return dt.date.fromisoformat(raw)
    except ValueError:
        pass
    raise bad("date", "date must be YYYY-MM-DD.")


def _dialect(body: dict[str, Any]) -> str:
    dialect = _text(body, "dialect", DEFAULT_DIALECT)
    if dialect not in DIALECT_NAMES:
        raise bad("dialect", f"dialect must be one of {', '.join(DIALECT_NAMES)}.")
    return dialect


def _environment(body: dict[str, Any]) -> str:
    environment = _text(body, "environment", "test")
    if environment not in ("test", "live"):
        raise bad("environment", "environment must be test or live.")
    return environment


def _key(sandbox: Sandbox, body: dict[str, Any]) -> BatchKey:
    account = _text(body, "account")
    environment = _environment(body)
    if not any(a.account == account and a.environment == environment
               for a in sandbox.settings.accounts):
        raise bad("account", f"No such account in {environment}: {account}")
    return BatchKey(_dialect(body), account, environment, _date(body))


def _open(sandbox: Sandbox, key: BatchKey) -> Batch:
    batch = sandbox.state.settlements.open_batch(key)
    if batch.closed:
        raise ApiError(409, "invalid_request", "settlement_closed",
                       f"The settlement {key.batch_id} ({key.dialect}) is closed.")
    return batch


async def list_batches(request: Request) -> Response:
    query = request.query_params
    found = sandbox_of(request).state.settlements.batches(
        dialect=query.get("dialect"), account=query.get("account"),
        environment=query.get("environment"))
    return JSONResponse({"data": [control_json(b) for b in found]})


async def close(request: Request) -> Response:
    sandbox = sandbox_of(request)
    body = await _body(request)
    day = _date(body)
    account = body.get("account")
    dialect = _dialect(body) if "dialect" in body else None
    environment = _environment(body) if "environment" in body else None
    if account is not None and not isinstance(account, str):
        raise bad("account", "account must be a string.")
    now = sandbox.clock.unix()
    closed = [sandbox.state.settlements.close(BatchKey(name, a.account, a.environment, day), now)
              for a in sandbox.settings.accounts for name in DIALECT_NAMES
              if account in (None, a.account) and environment in (None, a.environment)
              and dialect in (None, name)]
    return JSONResponse({"data": [control_json(b) for b in closed if b.visible]})


async def add_lines(request: Request) -> Response:
    sandbox = sandbox_of(request)
    body = await _body(request)
    key = _key(sandbox, body)
    specs = body.get("lines")
    if not isinstance(specs, list) or not specs:
        raise bad("lines", "lines must be a non-empty list.")
    batch = _open(sandbox, key)
    book = sandbox.state.settlements
    made: list[Line] = []
    suppress: list[str] = []
    duplicate: list[str] = []
    for i, spec in enumerate(specs):  # every entry is checked before any is applied
        where = f"lines[{i}]"
        if not isinstance(spec, dict):
            raise bad(where, f"{where} must be an object.")
        for verb, into in (("suppress", suppress), ("duplicate", duplicate)):
            if verb in spec:
                target = spec[verb]
                if len(spec) != 1 or not isinstance(target, str) or not book.known_object(
                        target, key.dialect, key.account, key.environment):
                    raise bad(f"{where}.{verb}", f"{verb} must be alone and name a payment, "
                              f"capture or refund of {key.account} ({key.dialect}).")
                into.append(target)
        if "suppress" not in spec and "duplicate" not in spec:
            made.append(_line(spec, where, key, batch, sandbox.clock.unix()))
    for line in made:
        batch.add(line)
    batch.suppressed.update(suppress)
    for target in duplicate:
        batch.duplicates[target] = batch.duplicates.get(target, 0) + 1
    return JSONResponse(control_json(batch))


def _int(spec: dict[str, Any], name: str, where: str, default: int | None = None) -> int:
    value = spec.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(f"{where}.{name}", f"{name} must be an integer (minor units).")
    return value


def _created(spec: dict[str, Any], where: str, key: BatchKey, now: int) -> int:
    raw = spec.get("created")
    if raw is None:
        noon = dt.datetime.combine(key.date, dt.time(12), dt.UTC)
        return now if day_of(now) == key.date else int(noon.timestamp())
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if isinstance(raw, str):
        try:
            parsed = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
            if parsed.tzinfo is not None:
                return int(parsed.timestamp())
        except ValueError:
            pass
    raise bad(f"{where}.created", "created must be unix seconds or an ISO-8601 UTC time.")


def _line(spec: dict[str, Any], where: str, key: BatchKey, batch: Batch, now: int) -> Line:
    unknown = sorted(set(spec) - _LINE_FIELDS)
    if unknown:
        raise bad(f"{where}.{unknown[0]}", f"Unknown line field {unknown[0]!r}.")
    dialect_type: list[tuple[str, str]] = []
    for dialect in ("adyen", "stripe"):
        if f"{dialect}_type" in spec:
            dialect_type.append((dialect, _text(spec, f"{dialect}_type")))
    default_type = "adjustment" if dialect_type else None
    type_ = spec.get("type", default_type)
    if type_ not in LINE_TYPES:
        raise bad(f"{where}.type", f"type must be one of {', '.join(LINE_TYPES)}.")
    texts = {}
    for name in ("payment", "refund", "capture", "reference"):
        value = spec.get(name, "")
        if not isinstance(value, str):
            raise bad(f"{where}.{name}", f"{name} must be a string.")
        texts[name] = value
    currency = _text(spec, "currency", batch.currency() or None)
    gross = _int(spec, "gross", where)
    fee = _int(spec, "fee", where, 0)
    net = _int(spec, "net", where, gross - fee)
    line_type: LineType = type_
    return Line(batch.next_manual_id(), line_type, texts["payment"], texts["refund"],
                texts["capture"], texts["reference"], _created(spec, where, key, now),
                currency, gross, fee, net, derived=False, dialect_type=tuple(dialect_type))


async def add_raw(request: Request) -> Response:
    sandbox = sandbox_of(request)
    body = await _body(request)
    key = _key(sandbox, body)
    if "csv_suffix_b64" in body:
        try:
            raw = base64.b64decode(_text(body, "csv_suffix_b64"), validate=True)
        except binascii.Error:
            raise bad("csv_suffix_b64", "csv_suffix_b64 must be base64.") from None
    else:
        raw = _text(body, "csv_suffix").encode("utf-8")
    batch = _open(sandbox, key)
    batch.raw_suffix += raw
    return JSONResponse(control_json(batch))


async def set_totals(request: Request) -> Response:
    sandbox = sandbox_of(request)
    body = await _body(request)
    key = _key(sandbox, body)
    totals: dict[str, int] = {name: _int(body, name, "totals") for name in ("gross", "fees", "net")
              if name in body}
    if not totals:
        raise bad("gross", "Give at least one of gross, fees, net.")
    batch = _open(sandbox, key)
    batch.override.update(totals)
    return JSONResponse(control_json(batch))
