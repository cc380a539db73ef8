"""Customers are authenticated by a bearer JWT; ``sub`` is the customer id.

HS256 with ``PAYCORE_JWT_SECRET``, or keys from ``PAYCORE_JWKS_URL``.
"""

from __future__ import annotations

import asyncio

import jwt
import jwt.types
from starlette.requests import Request

from paycore.config import Secret
from paycore.http.problems import Problem


class Authenticator:
    def __init__(self, *, secret: Secret | None, jwks_url: str | None) -> None:
        if secret is None and jwks_url is None:
            raise ValueError("PAYCORE_JWT_SECRET or PAYCORE_JWKS_URL must be set")
        self._secret = secret
        self._jwks = jwt.PyJWKClient(jwks_url, cache_keys=True) if jwks_url else None

    async def customer_id(self, request: Request) -> str:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Problem(401, "unauthenticated", "Authentication required",
                          "Send Authorization: Bearer <JWT>.", headers={"WWW-Authenticate": "Bearer"})
        try:
            claims = await self._decode(token.strip())
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
