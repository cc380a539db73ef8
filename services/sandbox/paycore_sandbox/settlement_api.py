"""Cardco's settlements wire: ``GET /v1/settlements`` and ``GET /v1/settlements/{id}/lines``.

The book is :mod:`paycore_sandbox.settlements`; this module only renders the Cardco
dialect's batches of the authenticated account (and environment):

- ``GET /v1/settlements?from=YYYY-MM-DD&to=YYYY-MM-DD`` → ``{"data": [batch, …]}``, the
  batches whose UTC ``date`` is in the range (inclusive), oldest first, only those with at
  least one line. A batch: ``{"id": "stl_20261203_acct_store", "object": "settlement",
  "account", "livemode", "date", "currency", "gross", "fees", "net", "lines": <count>,
  "status": "open"|"paid"}``. ``from``/``to`` missing or not a date, or ``from`` after
  ``to``: 400 ``parameter_invalid`` naming the parameter.
- ``GET /v1/settlements/{id}/lines`` → ``text/csv; charset=utf-8``, streamed: the header
  :data:`CSV_COLUMNS` then one row per line (ISO-8601 UTC ``created``, signed minor units),
  then any bytes a test planted (``/_sandbox/settlements/raw``). 404 ``resource_missing`` for
  an unknown batch or another account's.

Both are lookups: authenticated like every ``/v1`` request, behind the account's rate
limit (429) and every request fault. A fault rule's ``reference`` matches a settlement
request by its *path* (``/v1/settlements`` or ``/v1/settlements/{id}/lines``): a batch has
no merchant reference. ``malformed_body`` truncates the CSV's first chunk.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from collections.abc import AsyncIterator, Iterable, Sequence
from decimal import Decimal
from typing import Any, cast

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from paycore.currencies import exponent
from paycore_sandbox import api
from paycore_sandbox.errors import ApiError, JSONResponse, invalid_param, not_found
from paycore_sandbox.faults import FaultContext
from paycore_sandbox.settlements import Batch, Line

DIALECT = "cardco"
CSV_COLUMNS = ("line_id", "type", "payment", "refund", "capture", "reference", "created",
               "currency", "gross", "fee", "net")
CSV_MEDIA_TYPE = "text/csv; charset=utf-8"
_ROWS_PER_CHUNK = 1000


def iso_utc(unix: int) -> str:
    return dt.datetime.fromtimestamp(unix, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def batch_json(batch: Batch) -> dict[str, Any]:
    """A batch as Cardco's ``settlement`` object."""
    totals = batch.totals()
    key = batch.key
    return {"id": key.batch_id, "object": "settlement", "account": key.account,
            "livemode": key.environment == "live", "date": key.date.isoformat(),
            "currency": batch.currency(), "gross": totals.gross, "fees": totals.fees,
            "net": totals.net, "lines": len(batch.lines()),
            "status": "paid" if batch.closed else "open"}


def cardco_row(line: Line) -> list[str]:
    return [line.line_id, line.type, line.payment, line.refund, line.capture, line.reference,
            iso_utc(line.created), line.currency, str(line.gross), str(line.fee), str(line.net)]


async def csv_stream(header: Sequence[str], rows: Iterable[Sequence[str]],
                     suffix: bytes = b"") -> AsyncIterator[bytes]:
    """The CSV, written lazily a chunk of rows at a time (a batch may hold hundreds of
    thousands of lines: ``rows`` should be a generator), then ``suffix`` verbatim."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for count, row in enumerate(rows, 1):
        writer.writerow(row)
        if count % _ROWS_PER_CHUNK == 0:
            yield buffer.getvalue().encode("utf-8")
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue().encode("utf-8")
    if suffix:
        yield suffix


def major(amount: int, currency: str) -> str:
    """Minor units as the currency's major units with its decimals (``1234`` EUR → ``12.34``;
    an unknown currency: 2), for the reports that speak major units (Stripe's CSV, Adyen's)."""
    places = exponent(currency.upper())
    places = 2 if places is None else places
    return str(Decimal(amount).scaleb(-places).quantize(Decimal(1).scaleb(-places)))


def parse_day(value: str | None, param: str) -> dt.date:
    if not value:
        raise invalid_param(param, f"The {param} query parameter is required (YYYY-MM-DD).")
    try:
        return dt.date.fromisoformat(value) if len(value) == 10 else _bad_day(param, value)
    except ValueError:
        return _bad_day(param, value)


def _bad_day(param: str, value: str) -> dt.date:
    raise invalid_param(param, f"{param} must be a date, YYYY-MM-DD; got {value!r}.")


async def list_settlements(request: Request) -> Response:
    arrival = await api.arrive(request)
    if arrival.account is None:
        return cast(Response, arrival.rejection)
    state, account = arrival.state, arrival.account
    ctx = FaultContext(account.account, "lookup", request.url.path)

    def answer() -> Response:
        try:
            start = parse_day(request.query_params.get("from"), "from")
            end = parse_day(request.query_params.get("to"), "to")
        except ApiError as exc:
            return exc.response()
        if start > end:
            return invalid_param("from", "from must not be after to.").response()
        found = [b for b in state.settlements.batches(dialect=DIALECT, account=account.account,
                                                      environment=account.environment)
                 if start <= b.key.date <= end and b.visible]
        return JSONResponse({"data": [batch_json(b) for b in found]})

    return await api.rate_limited_lookup(request, arrival, ctx, answer)


async def settlement_lines(request: Request) -> Response:
    arrival = await api.arrive(request)
    if arrival.account is None:
        return cast(Response, arrival.rejection)
    state, account = arrival.state, arrival.account
    batch_id = request.path_params["settlement_id"]
    ctx = FaultContext(account.account, "lookup", request.url.path)

    def answer() -> Response:
        batch = state.settlements.by_id(DIALECT, batch_id)
        if batch is None or batch.key.account != account.account \
                or batch.key.environment != account.environment or not batch.visible:
            return not_found(f"No such settlement: {batch_id}").response()
        rows = (cardco_row(line) for line in batch.lines())
        return StreamingResponse(csv_stream(CSV_COLUMNS, rows, batch.raw_suffix),
                                 media_type=CSV_MEDIA_TYPE)

    return await api.rate_limited_lookup(request, arrival, ctx, answer)
