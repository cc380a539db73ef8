"""Adyen's Settlement details report over the settlement book.

``GET|HEAD /reports/download/MerchantAccount/{merchantAccount}/settlement_detail_report_batch_{n}.csv``
with HTTP Basic auth of the merchant account's report user (:func:`report_user`,
:func:`report_password`; shown by ``GET /_sandbox/accounts`` under ``adyen``): 401 without them
or with wrong ones, 404 for a batch that is not (yet) there. Batches are the book's closed
Adyen-dialect batches of the merchant account's *test* environment (the report host is
Adyen's test one), numbered from 1 in the order they were closed
(:meth:`paycore_sandbox.settlements.SettlementBook.close`). The answer is streamed
``text/csv`` with ``Last-Modified`` = the batch's close (sandbox clock); HEAD answers the
headers alone.

Rows (:data:`COLUMNS`; amounts in major units with the currency's decimals, empty where not
applicable; ``Creation Date`` ``YYYY-MM-DD HH:MM:SS`` with ``TimeZone`` ``UTC``): a charge is
``Settled`` (Gross/Net Credit, ``Commission`` = fee), a refund ``Refunded`` (Gross/Net Debit),
a refund reversal ``RefundedReversed``, a fee ``Fee`` (Net Debit), an adjustment
``DepositCorrection``; a hand-made line's ``adyen_type`` (``Chargeback``, …) is its type. Psp
Reference is the payment's pspReference; Modification Reference the capture's or refund's
(:func:`.adyen_webhooks.movement_psp_reference`), else the payment's; Modification Merchant
Reference the capture's or refund's own reference. Last comes one ``MerchantPayout`` row whose
Net Debit is the batch's net total (a planted ``/totals`` net included), so that
Σ(Net Credit − Net Debit) is 0 for an untouched batch; then any planted raw bytes.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import email.utils
import hmac
import re
from collections.abc import Iterator

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse

from paycore_sandbox.api import sandbox_of
from paycore_sandbox.dialects.adyen_webhooks import movement_psp_reference
from paycore_sandbox.dialects.adyen_wire import NAME
from paycore_sandbox.settings import SandboxAccount
from paycore_sandbox.settlement_api import CSV_MEDIA_TYPE, csv_stream, major
from paycore_sandbox.settlements import Batch, Line
from paycore_sandbox.state import SandboxState

PATH = "/reports/download/MerchantAccount/{merchant_account}/{filename}"
COMPANY_ACCOUNT = "Sandbox"
COLUMNS = (
    "Company Account", "Merchant Account", "Psp Reference", "Merchant Reference",
    "Payment Method", "Creation Date", "TimeZone", "Type", "Modification Reference",
    "Gross Currency", "Gross Debit (GC)", "Gross Credit (GC)", "Exchange Rate", "Net Currency",
    "Net Debit (NC)", "Net Credit (NC)", "Commission (NC)", "Markup (NC)", "Scheme Fees (NC)",
    "Interchange (NC)", "Payment Method Variant", "Modification Merchant Reference",
    "Batch Number", "Reserved4", "Reserved5")
TYPES = {"charge": "Settled", "refund": "Refunded", "refund_reversal": "RefundedReversed",
         "fee": "Fee", "adjustment": "DepositCorrection"}
_FILENAME = re.compile(r"settlement_detail_report_batch_([1-9][0-9]*)\.csv")


def report_user() -> str:
    return f"report@Company.{COMPANY_ACCOUNT}"


def report_password(account: SandboxAccount) -> str:
    return f"report-password-{account.account}"


def _authorized(request: Request, merchant_account: str) -> bool:
    scheme, _, credential = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "basic":
        return False
    try:
        user, _, password = base64.b64decode(credential.strip(), validate=True).decode() \
            .partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return False
    expected = f"report-password-{merchant_account}"
    return user == report_user() and hmac.compare_digest(password.encode(), expected.encode())


def _debit_credit(amount: int, currency: str) -> tuple[str, str]:
    """(debit, credit) columns of a signed amount; both empty for 0."""
    if amount > 0:
        return "", major(amount, currency)
    if amount < 0:
        return major(-amount, currency), ""
    return "", ""


def _row(state: SandboxState, batch: Batch, line: Line) -> list[str]:
    kind = line.type_in(NAME) or TYPES[line.type]
    payment = state.ledger.get(line.payment) if line.payment else None
    movement_id = line.refund or line.capture
    if movement_id:
        known = state.movements.get(movement_id) is not None
        modification = movement_psp_reference(movement_id) if known else movement_id
    else:
        modification = line.payment
    gross_debit, gross_credit = _debit_credit(line.gross, line.currency)
    net_debit, net_credit = _debit_credit(line.net, line.currency)
    commission = major(line.fee, line.currency) if line.fee and kind != "Fee" else ""
    merchant_reference = payment.reference if payment is not None else \
        ("" if movement_id else line.reference)
    method = "visa" if line.payment else ""
    return [COMPANY_ACCOUNT, batch.key.account, line.payment, merchant_reference, method,
            _when(line.created), "UTC", kind, modification, line.currency, gross_debit,
            gross_credit, "1" if line.payment else "", line.currency, net_debit, net_credit,
            commission, "", "", "", method, line.reference if movement_id else "",
            str(batch.number), "", ""]


def _when(unix: int) -> str:
    return dt.datetime.fromtimestamp(unix, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _rows(state: SandboxState, batch: Batch) -> Iterator[list[str]]:
    for line in batch.lines():
        yield _row(state, batch, line)
    net = batch.totals().net
    currency = batch.currency()
    debit, credit = _debit_credit(-net, currency)  # the payout takes the net out
    yield [COMPANY_ACCOUNT, batch.key.account, "", "", "", _when(batch.closed_at or 0), "UTC",
           "MerchantPayout", "", "", "", "", "", currency, debit, credit, "", "", "", "", "",
           "", str(batch.number), "", ""]


async def download(request: Request) -> Response:
    merchant_account = request.path_params["merchant_account"]
    if not _authorized(request, merchant_account):
        return PlainTextResponse("HTTP Status 401 - Unauthorized", status_code=401,
                                 headers={"WWW-Authenticate": 'Basic realm="Adyen"'})
    sandbox = sandbox_of(request)
    found = _FILENAME.fullmatch(request.path_params["filename"])
    batch = sandbox.state.settlements.by_number(NAME, merchant_account, "test",
                                                int(found.group(1))) if found else None
    if batch is None or batch.closed_at is None:
        return PlainTextResponse("HTTP Status 404 - Not Found", status_code=404)
    headers = {"Last-Modified": email.utils.formatdate(batch.closed_at, usegmt=True)}
    return StreamingResponse(csv_stream(COLUMNS, _rows(sandbox.state, batch), batch.raw_suffix),
                             media_type=CSV_MEDIA_TYPE, headers=headers)
