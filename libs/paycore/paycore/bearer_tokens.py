"""Verifying a bearer JWT: its signature, expiry, audience and issuer.

One verifier for every service that takes tokens from the identity provider:
the checkout service's customers and the operator console's operators
(the console's credentials). HS256 with a shared
secret, or RS256/ES256 keys from ``PAYCORE_JWKS_URL``. The key set is cached and refetched when a token
names an unknown ``kid`` (at most once per cooldown), so the identity provider
can rotate keys. What a verified token *means* -- a customer id, an operator's
role -- is the caller's to decide; failures are PyJWT's own exceptions
(``jwt.PyJWKClientConnectionError`` when the key set cannot be fetched).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import jwt
import jwt.types

from paycore.settings_spec import Secret

# Seconds: how long a fetched key set is trusted, and how long one fetch may take.
JWKS_LIFESPAN_S = 300
JWKS_FETCH_TIMEOUT_S = 5
# Only asymmetric algorithms with a key set: an HMAC token must never be checked against a
# public key (algorithm confusion).
JWKS_ALGORITHMS = ("RS256", "ES256")


class TokenVerifier:
    """Checks a token against a secret (HS256) or a JWKS (RS256/ES256; wins when both are given)."""

    def __init__(self, *, secret: Secret | None, jwks_url: str | None,
                 jwks_refetch_cooldown_s: float = 30.0, leeway_s: float = 30.0) -> None:
        if secret is None and jwks_url is None:
            raise ValueError("a secret or a JWKS URL is required")
        self._secret = secret
        self._leeway_s = leeway_s
        self._jwks = (jwt.PyJWKClient(jwks_url, cache_keys=True, lifespan=JWKS_LIFESPAN_S,
                                      timeout=JWKS_FETCH_TIMEOUT_S,
                                      cooldown_duration=jwks_refetch_cooldown_s)
                      if jwks_url else None)

    @property
    def uses_jwks(self) -> bool:
        return self._jwks is not None

    async def decode(self, token: str, *, audiences: Sequence[str], issuer: str | None,
                     require: Sequence[str] = ("sub", "exp")) -> dict[str, object]:
        """The verified claims. ``aud`` is checked only when ``audiences`` names some.

        Raises a ``jwt.PyJWTError``: the signature, a required claim, the audience,
        the issuer, or (``PyJWKClientConnectionError``) the key set cannot be fetched.
        """
        options: jwt.types.Options = {"require": list(require), "verify_aud": bool(audiences)}
        if self._jwks is not None:
            # PyJWKClient fetches over blocking HTTP; keep it off the event loop.
            signing_key = await asyncio.to_thread(self._jwks.get_signing_key_from_jwt, token)
            key, algorithms = signing_key.key, list(JWKS_ALGORITHMS)
        else:
            assert self._secret is not None
            key, algorithms = self._secret.reveal(), ["HS256"]
        return jwt.decode(token, key, algorithms=algorithms, options=options,
                          audience=list(audiences) or None, issuer=issuer, leeway=self._leeway_s)
