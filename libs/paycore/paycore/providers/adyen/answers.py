"""What an Adyen answer other than its success means: one table for ``/payments`` and the modifications.

Adyen's idempotency rules (``Transient-Error``, error code 704) and its error bodies are the
same on every Checkout ``POST`` (https://docs.adyen.com/development-resources/api-idempotency,
https://docs.adyen.com/development-resources/response-handling), so the create and the
captures, cancels and refunds read a refusal, a key in progress or reused, a rate limit and a
server error the same way, here. Each caller maps the result to its own outcome type and
reads its own success status.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from paycore.providers.adyen.wire import UNREADABLE, is_transient, parse_error, read_json, retry_after_seconds
from paycore.providers.http import DEFAULT_RETRY_AFTER_S


@dataclass(frozen=True)
class ErrorAnswer:
    """What one non-success answer says.

    :param reason: The Unknown reason, on any send the answer proves nothing about.
    :param refused_code: Set when Adyen refused this request before executing it (a
        ``validation`` error's code, or ``auth``): on the only send nothing happened; on a
        resend it proves nothing (``reason``).
    :param request_rejected: The same bytes will be refused again (a validation error).
    :param error_code: Adyen's ``errorCode``, when the body had one (for the logs).
    :param retry_after_s: When to ask again, for a 429 (``Retry-After``, else the default).
    :param meta: ``http_status``.
    """

    reason: str
    refused_code: str | None = None
    request_rejected: bool = False
    error_code: str | None = None
    retry_after_s: float | None = None
    meta: dict[str, Any] = field(default_factory=dict)


def classify_error(response: httpx.Response) -> ErrorAnswer:
    """Map an Adyen answer that is not the endpoint's success.

    ===============================  ================================================
    answer                           result
    ===============================  ================================================
    ``Transient-Error: true``        ``provider.transient-error`` (any status: Adyen
                                     asks for the same-key resend)
    400/409/422 errorCode 704        ``provider.in-progress``
    400/422 about the idempotency    ``provider.key-reused``
    key
    409 (other)                      ``provider.conflict``
    400/422 ``validation``           refused ``<errorCode>``, request rejected; resend
                                     reason ``provider.rejected-this-send.<errorCode>``
    400/422 not JSON / not an error  ``provider.body-unreadable`` /
    or not ``validation``            ``provider.body-unrecognized``
    401, 403                         refused ``auth``; resend reason
                                     ``provider.rejected.auth``
    429                              ``provider.rate-limited``, with ``retry_after_s``
    5xx                              ``provider.http-<status>``
    other                            ``provider.unexpected-status-<status>``
    ===============================  ================================================

    Adyen does not say whether an answer was replayed from the key; a validation error is
    never stored under it, so a refusal is the refusal of this very send.
    """
    status = response.status_code
    meta: dict[str, Any] = {"http_status": status}
    if is_transient(response):
        return ErrorAnswer("provider.transient-error", meta=meta)
    if status in (400, 409, 422):
        body = read_json(response.content)
        error = None if body is UNREADABLE else parse_error(body)
        code = error.error_code if error is not None else None
        if error is not None and error.in_progress:
            # Another send under this key is executing or has executed.
            return ErrorAnswer("provider.in-progress", error_code=code, meta=meta)
        if error is not None and error.about_idempotency:
            return ErrorAnswer("provider.key-reused", error_code=code, meta=meta)
        if status == 409:
            return ErrorAnswer("provider.conflict", error_code=code, meta=meta)
        if body is UNREADABLE:
            return ErrorAnswer("provider.body-unreadable", meta=meta)
        if error is None or error.error_type != "validation":
            return ErrorAnswer("provider.body-unrecognized", error_code=code, meta=meta)
        return ErrorAnswer(f"provider.rejected-this-send.{error.error_code}", error.error_code,
                           request_rejected=True, error_code=code, meta=meta)
    if status in (401, 403):
        # Refused before anything was looked at; on a resend it proves nothing.
        return ErrorAnswer("provider.rejected.auth", "auth", meta=meta)
    if status == 429:
        retry_after = retry_after_seconds(response.headers)
        return ErrorAnswer("provider.rate-limited", meta=meta,
                           retry_after_s=DEFAULT_RETRY_AFTER_S if retry_after is None else retry_after)
    if 500 <= status <= 599:
        return ErrorAnswer(f"provider.http-{status}", meta=meta)
    return ErrorAnswer(f"provider.unexpected-status-{status}", meta=meta)
