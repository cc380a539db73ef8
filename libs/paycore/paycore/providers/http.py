"""How every provider client reaches its provider over HTTP, and what a stored request must still fit.

One home for the rules the adapters share (``cardco``, ``stripe``, ``adyen`` import them,
nothing here imports a provider):

- :func:`no_retry_client`: the one kind of connection pool a payment request leaves by: no
  retries (``retries=0``), no redirects, no timeout of its own (the call's budget is the
  deadline), no proxy from the environment (``trust_env=False``), keep-alive shorter than
  the usual server idle timeout;
- :func:`send_once`: one send under a budget, and the reason there is no answer when there is
  none (every such ending is Unknown for a create, ``failed`` for a lookup);
- :func:`lookup_result`: what a lookup's answer says (a miss only on a 404 that means one);
- :func:`stored_url`, :func:`stored_body`, :func:`header_token`: the money-safety rules of a
  stored request, applied before anything is sent: it goes only to the configured account's
  origin, without userinfo, under a key the provider accepts, with the bytes stored;
- :class:`NotBuildable`: why a stored request cannot be sent as stored.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Callable
from typing import Any, Final

import httpx

from paycore.clock import Clock
from paycore.errors import PaycoreError
from paycore.providers.aiohttp_pool import aiohttp_transport
from paycore.providers.base import LookupResult, StoredRequest
from paycore.providers.json_body import UNREADABLE, read_json

DEFAULT_PORTS: Final = {"http": 80, "https": 443}

# When a 429 carries no usable Retry-After.
DEFAULT_RETRY_AFTER_S: Final = 1.0

# A header value we write from a stored or configured value (API key, account, version,
# idempotency key) is visible ASCII without whitespace.
_TOKEN_RE: Final = re.compile(r"[\x21-\x7e]+")


class NotBuildable(PaycoreError):
    """A stored value cannot be sent as stored; ``reason`` is the suffix of the outcome reason
    (``request.not-buildable.<reason>``), e.g. ``endpoint-changed``, ``invalid-header``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# ---------------------------------------------------------------------------
# The pool and one send


def no_retry_client(transport: httpx.AsyncBaseTransport | None = None, *,
                    verify: ssl.SSLContext | bool = True) -> httpx.AsyncClient:
    """The connection pool of a provider client: every way a payment request leaves is visible here.

    :param transport: Replaces the HTTP transport (tests); its own pool settings then apply.
    :param verify: The TLS trust (Stripe's SDK brings its own CA bundle).
    """
    return httpx.AsyncClient(
        # aiohttp's pool under httpx's transport (paycore.providers.aiohttp_pool): it never
        # retries, adds no headers and reads each answer whole. keepalive_expiry below the
        # common 5 s server idle timeout (uvicorn's default), so we rarely reuse a connection
        # the server is closing: that race would turn a healthy call into an Unknown.
        transport=transport or aiohttp_transport(max_connections=100, keepalive_expiry=4.0, verify=verify),
        timeout=None, follow_redirects=False, trust_env=False,
    )


async def send_once(client: httpx.AsyncClient, request: httpx.Request, clock: Clock, limit_s: float,
                    limit_name: str) -> httpx.Response | str:
    """Send ``request`` once within ``limit_s`` seconds on ``clock``: the response, or why there is none.

    ``stream=False`` (the default) reads the whole body here, so a response that ends early is
    a transport error, not a parse error. Only the expected failure types are caught: a bug
    raises.
    """
    try:
        async with clock.budget(limit_s):
            return await client.send(request)
    except TimeoutError:
        return f"provider.no-response.{limit_name}"
    except httpx.TransportError as exc:
        # Connect/read/write errors, a reset, a remote protocol error, an incomplete body: each
        # means the same for the payment.
        return f"provider.transport.{type(exc).__name__}"
    except httpx.DecodingError:
        # The body could not be decoded (e.g. a broken Content-Encoding).
        return "provider.body-unreadable"


def lookup_result(status: int, body: bytes | str | None, retry_after_s: float | None, *,
                  found: Callable[[Any], LookupResult], not_found_on_404: bool) -> LookupResult:
    """What a lookup's answer says: ``found(json)`` reads a 200; ``not_found`` only on a 404 that
    means "no such payment" (by id; a search never answers 404 for a miss); ``rate_limited`` on
    429 (``retry_after_s``, else :data:`DEFAULT_RETRY_AFTER_S`); anything else ``failed``, which
    is never "not found"."""
    if status == 200:
        parsed = read_json(body)
        if parsed is UNREADABLE:
            return LookupResult("failed", reason="provider.body-unreadable")
        return found(parsed)
    if status == 404 and not_found_on_404:
        return LookupResult("not_found")
    if status == 429:
        return LookupResult("rate_limited", reason="provider.rate-limited",
                            retry_after_s=DEFAULT_RETRY_AFTER_S if retry_after_s is None else retry_after_s)
    if status in (401, 403):
        return LookupResult("failed", reason="provider.rejected.auth")
    if 500 <= status <= 599:
        return LookupResult("failed", reason=f"provider.http-{status}")
    return LookupResult("failed", reason=f"provider.unexpected-status-{status}")


# ---------------------------------------------------------------------------
# What a stored request must still fit


def origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return url.scheme, url.host, url.port or DEFAULT_PORTS.get(url.scheme)


def stored_url(stored: StoredRequest, base_url: str, *, max_key_length: int) -> httpx.URL:
    """Where the stored request goes, if it may still go there under its key.

    The stored endpoint must be on the configured account's origin (a resend to another host,
    port or region could be a second payment: keys are not shared across them), without
    userinfo (httpx would turn it into Basic auth beside our credentials), and the stored key
    must be 1 to ``max_key_length`` characters (a longer one would be refused anyway; an
    empty one is no key).

    :raises NotBuildable: ``endpoint-changed`` (also for a URL that does not parse), or
        ``invalid-header`` for the key.
    """
    try:
        url = httpx.URL(stored.endpoint)
        base = httpx.URL(base_url)
    except httpx.InvalidURL:
        raise NotBuildable("endpoint-changed") from None
    if url.scheme not in DEFAULT_PORTS or not url.host or url.userinfo or origin(url) != origin(base):
        raise NotBuildable("endpoint-changed")
    if not 0 < len(stored.idempotency_key) <= max_key_length:
        raise NotBuildable("invalid-header")
    return url


def stored_body(stored: StoredRequest) -> bytes:
    """The stored body's UTF-8 bytes, sent unchanged on every send.

    :raises NotBuildable: ``invalid-body``: it holds lone surrogates, so it cannot be sent as stored.
    """
    try:
        return stored.request_body.encode("utf-8")
    except UnicodeEncodeError:
        raise NotBuildable("invalid-body") from None


def is_token(value: str) -> bool:
    """Visible ASCII, no whitespace: what a header value we write must be."""
    return _TOKEN_RE.fullmatch(value) is not None


def header_token(value: str) -> str:
    """``value`` as a header value.

    :raises NotBuildable: ``invalid-header``.
    """
    if not is_token(value):
        raise NotBuildable("invalid-header")
    return value
