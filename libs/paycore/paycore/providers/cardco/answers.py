"""What a Cardco ``POST`` answer other than its success means: one table for every ``POST``.

The contract's idempotency rules of ``POST /v1/payments`` apply to every ``POST`` (captures,
cancels, refunds), so the create and the operations read a refusal, a rate limit, a key in
progress or reused and a server error the same way, here. Each caller maps the result to its
own outcome type and reads its success statuses itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx

from paycore.providers.cardco.wire import (
    UNREADABLE,
    error_code,
    is_replayed,
    read_json,
    retry_after_seconds,
)


@dataclass(frozen=True)
class ErrorAnswer:
    """What one non-success answer says.

    :param reason: The Unknown reason, on any send the answer proves nothing about.
    :param refused_code: Set when the provider documents that it refused this request before
        executing it (``<code>[:<param>]`` for a 400, ``rate_limited`` for a 429): on the
        only send, nothing happened. On a resend it proves nothing (``reason``).
    :param request_rejected: The same bytes will be refused again (a documented 400).
    :param meta: ``http_status``, ``replayed`` and, with a ``Retry-After``, ``detail``.
    """

    reason: str
    refused_code: str | None = None
    request_rejected: bool = False
    meta: dict[str, Any] = field(default_factory=dict)


def classify_error(response: httpx.Response, *, rejection_codes: frozenset[str],
                   now: datetime) -> ErrorAnswer:
    """Map a non-success answer of a Cardco ``POST``.

    ======  ================  ==============================================================
    status  body              result
    ======  ================  ==============================================================
    400     documented code   refused ``<code>[:<param>]``, request rejected; resend reason
                              ``provider.rejected-this-send.<code>``
    400     other / unread    ``provider.body-unrecognized`` / ``provider.body-unreadable``
    429     any               refused ``rate_limited``; resend reason ``provider.rate-limited``
    409     any               ``provider.in-progress``
    422     any               ``provider.key-reused`` (the stored body never changes: our bug)
    401/3   any               ``provider.rejected.auth``
    5xx     any               ``provider.http-<status>`` (a 500 is stored and may hide a done
                              operation; even a 503 may come from a proxy that forwarded it)
    other   any               ``provider.unexpected-status-<status>``
    ======  ================  ==============================================================

    :param rejection_codes: The 400 codes the contract documents for this endpoint as
        "nothing done"; any other 400 is not understood, so Unknown.
    """
    status = response.status_code
    meta: dict[str, Any] = {"http_status": status, "replayed": is_replayed(response)}
    if status == 400:
        body = read_json(response.content)
        if body is UNREADABLE:
            return ErrorAnswer("provider.body-unreadable", meta=meta)
        error = error_code(body)
        if error is None or error[0] not in rejection_codes:
            return ErrorAnswer("provider.body-unrecognized", meta=meta)
        code, param = error
        # The contract never stores a 400 under the key, so a replayed one is off-contract
        # and proves nothing either (the caller's refused_before_execution checks replayed).
        return ErrorAnswer(f"provider.rejected-this-send.{code}", code + (f":{param}" if param else ""),
                           request_rejected=True, meta=meta)

    retry_after = retry_after_seconds(response, now)
    if retry_after is not None:
        meta["detail"] = {"retry_after_s": retry_after}
    if status == 429:
        # Rejected before execution and not stored under the key; the same bytes may pass later.
        return ErrorAnswer("provider.rate-limited", "rate_limited", meta=meta)
    if status == 409:
        return ErrorAnswer("provider.in-progress", meta=meta)
    if status == 422:
        return ErrorAnswer("provider.key-reused", meta=meta)
    if status in (401, 403):
        return ErrorAnswer("provider.rejected.auth", meta=meta)
    if 500 <= status <= 599:
        return ErrorAnswer(f"provider.http-{status}", meta=meta)
    return ErrorAnswer(f"provider.unexpected-status-{status}", meta=meta)
