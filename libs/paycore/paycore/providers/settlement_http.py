"""How a settlement source reaches its provider: one GET at a time, its body streamed.

Not the payment calls' pool (:func:`paycore.providers.http.no_retry_client`): that one reads
each answer whole before handing it over (:mod:`paycore.providers.aiohttp_pool`), right for a
payment's JSON and wrong for a report of a million rows. These are reads, so nothing here moves
money; still no retries (a failed read is reported and the batch is read again on the next run),
no redirects, no proxy from the environment, and a read timeout, since a report has no budget
of a caller's. Every way a whole answer cannot be had is a
:class:`~paycore.settlement_lines.SettlementSourceError` saying which; nothing else is caught.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Final

import httpx
import orjson

from paycore.settlement_lines import SettlementSourceError

__all__ = ["REPORT_TIMEOUT_S", "get_json", "report_client", "status_problem", "stream_body"]

REPORT_TIMEOUT_S: Final = 60.0  # connect, and each read of the body


def report_client(transport: httpx.AsyncBaseTransport | None = None, *,
                  timeout_s: float = REPORT_TIMEOUT_S) -> httpx.AsyncClient:
    """A client for one run of reads: streams, never retries, follows no redirect."""
    return httpx.AsyncClient(transport=transport or httpx.AsyncHTTPTransport(retries=0),
                             timeout=httpx.Timeout(timeout_s), follow_redirects=False, trust_env=False)


def status_problem(what: str, response: httpx.Response, *, refused: str) -> str:
    """Why a non-200 answer gives nothing to read (``refused``: what a 401/403 means here)."""
    status = response.status_code
    if status in (401, 403):
        return f"{what}: HTTP {status}, {refused}"
    if status == 404:
        return f"{what}: HTTP 404, not found"
    if status == 429:
        after = response.headers.get("Retry-After")
        return f"{what}: HTTP 429, rate limited" + (f" (Retry-After {after[:20]})" if after else "")
    if 500 <= status <= 599:
        return f"{what}: HTTP {status}, the provider failed"
    return f"{what}: unexpected HTTP {status}"


async def get_json(client: httpx.AsyncClient, request: httpx.Request, *, what: str, refused: str) -> Any:
    """The JSON body of a 200 answer to ``request``."""
    try:
        response = await client.send(request)
    except httpx.HTTPError as exc:
        raise SettlementSourceError(f"{what}: no answer ({type(exc).__name__})") from exc
    if response.status_code != 200:
        raise SettlementSourceError(status_problem(what, response, refused=refused))
    try:
        return orjson.loads(response.content)
    except orjson.JSONDecodeError:
        raise SettlementSourceError(f"{what}: the answer is not JSON") from None


async def stream_body(client: httpx.AsyncClient, request: httpx.Request, *, what: str,
                      refused: str) -> AsyncIterator[bytes]:
    """The body of a 200 answer to ``request``, chunk by chunk, never held whole.

    A body cut short raises :class:`SettlementSourceError` after the rows already read: the
    batch cannot be had whole, so the caller records none of it (the next run reads it again).
    """
    try:
        response = await client.send(request, stream=True)
    except httpx.HTTPError as exc:
        raise SettlementSourceError(f"{what}: no answer ({type(exc).__name__})") from exc
    try:
        if response.status_code != 200:
            raise SettlementSourceError(status_problem(what, response, refused=refused))
        try:
            async for chunk in response.aiter_bytes():
                yield chunk
        except httpx.HTTPError as exc:
            raise SettlementSourceError(f"{what}: the answer was cut short ({type(exc).__name__})") from exc
    finally:
        await response.aclose()
