"""Customers are authenticated by a bearer JWT; ``sub`` is the customer id.

HS256 with ``PAYCORE_JWT_SECRET``, or RS256/ES256 keys from ``PAYCORE_JWKS_URL``
(which wins when both are set). The key set is cached and refetched when a
token names an unknown ``kid``, so the identity provider can rotate keys. An
unreachable key set is the server's problem, not the customer's: 503, not 401.
"""

from __future__ import annotations

import asyncio
import logging

import jwt
import jwt.types
from starlette.requests import Request

from paycore.config import Secret
from paycore.http.problems import Problem

log = logging.getLogger("paycore.checkout.auth")

# Seconds: how long a fetched key set is trusted, and how long one fetch may take.
JWKS_LIFESPAN_S = 300
JWKS_FETCH_TIMEOUT_S = 5


class Authenticator:
    def __init__(self, *, secret: Secret | None, jwks_url: str | None,
                 jwks_refetch_cooldown_s: float = 30.0) -> None:
        if secret is None and jwks_url is None:
            raise ValueError("PAYCORE_JWT_SECRET or PAYCORE_JWKS_URL must be set")
        self._secret = secret
        self._jwks = (jwt.PyJWKClient(jwks_url, cache_keys=True, lifespan=JWKS_LIFESPAN_S,
                                      timeout=JWKS_FETCH_TIMEOUT_S,
                                      cooldown_duration=jwks_refetch_cooldown_s)
                      if jwks_url else None)

    async def customer_id(self, request: Request) -> str:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Problem(401, "unauthenticated", "Authentication required",
                          "Send Authorization: Bearer <JWT>.", headers={"WWW-Authenticate": "Bearer"})
        try:
            claims = await self._decode(token.strip())
        except jwt.PyJWKClientConnectionError as exc:
            log.warning("JWKS unreachable: %s", type(exc).__name__)
            raise Problem(503, "auth-keys-unavailable", "Authentication keys unavailable",
                          "The identity provider's keys could not be fetched; retry shortly.",
                          headers={"Retry-After": "5"}) from None
        except jwt.PyJWTError:
            # The token itself is never logged or echoed.
            raise Problem(401, "unauthenticated", "Invalid token", "The bearer token is not valid.",
                          headers={"WWW-Authenticate": 'Bearer error="invalid_token"'}) from None
        sub = claims.get("sub")
        if not isinstance(sub, str) or not sub.strip() or len(sub) > 200:
            raise Problem(401, "unauthenticated", "Invalid token", "The token has no usable subject.")
        return sub

    async def _decode(self, token: str) -> dict[str, object]:
        options: jwt.types.Options = {"require": ["sub", "exp"]}
        if self._jwks is not None:
            # PyJWKClient fetches over blocking HTTP; keep it off the event loop.
            key = await asyncio.to_thread(self._jwks.get_signing_key_from_jwt, token)
            return jwt.decode(token, key.key, algorithms=["RS256", "ES256"], options=options)
        assert self._secret is not None
        return jwt.decode(token, self._secret.reveal(), algorithms=["HS256"], options=options)
