"""Customers are authenticated by a bearer JWT; ``sub`` is the customer id.

HS256 with ``PAYCORE_JWT_SECRET``, or RS256/ES256 keys from ``PAYCORE_JWKS_URL``
(which wins when both are set), verified by the library's
:class:`paycore.bearer_tokens.TokenVerifier` (the console verifies operators'
tokens with it too). An unreachable key set is the server's problem, not the
customer's: 503, not 401.

``aud`` must name one of ``PAYCORE_JWT_AUDIENCE`` and ``iss`` must equal
``PAYCORE_JWT_ISSUER`` when they are set (a JWKS requires both, see
``paycore.config``). A token with an ``aud`` that no configured audience can
vouch for is refused unless ``PAYCORE_JWT_ALLOW_ANY_AUDIENCE=true``. The
subject is checked before it goes anywhere near PostgreSQL.
"""

from __future__ import annotations

import logging
import unicodedata

import jwt
from starlette.requests import Request

from paycore.bearer_tokens import TokenVerifier
from paycore.config import JwtClaimRules, Secret
from paycore.http.problems import Problem

log = logging.getLogger("paycore.checkout.auth")

MAX_SUBJECT_CHARS = 200
# Unicode categories a customer id may not hold: control characters (NUL is refused
# by PostgreSQL text) and surrogates (a lone one cannot be encoded as UTF-8).
_FORBIDDEN_IN_SUBJECT = frozenset({"Cc", "Cs"})


def _invalid_token(detail: str) -> Problem:
    # The token itself is never logged or echoed.
    return Problem(401, "unauthenticated", "Invalid token", detail,
                   headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})


def usable_subject(sub: object) -> str | None:
    """The customer id a verified token names, or None if it cannot be one."""
    if not isinstance(sub, str) or not sub.strip() or len(sub) > MAX_SUBJECT_CHARS:
        return None
    if any(unicodedata.category(c) in _FORBIDDEN_IN_SUBJECT for c in sub):
        return None
    return sub


class Authenticator:
    def __init__(self, *, secret: Secret | None, jwks_url: str | None,
                 jwks_refetch_cooldown_s: float = 30.0, claims: JwtClaimRules | None = None) -> None:
        if secret is None and jwks_url is None:
            raise ValueError("PAYCORE_JWT_SECRET or PAYCORE_JWKS_URL must be set")
        self._claims = claims or JwtClaimRules()
        self._warned_unconfigured_audience = False
        if self._claims.allow_any_audience:
            log.warning("PAYCORE_JWT_ALLOW_ANY_AUDIENCE=true: the audience (aud) of customer tokens is "
                        "not verified; a token the identity provider issued for any application is accepted")
        self._verifier = TokenVerifier(secret=secret, jwks_url=jwks_url,
                                       jwks_refetch_cooldown_s=jwks_refetch_cooldown_s,
                                       leeway_s=self._claims.leeway_s)

    async def customer_id(self, request: Request) -> str:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Problem(401, "unauthenticated", "Authentication required",
                          "Send Authorization: Bearer <JWT>.", headers={"WWW-Authenticate": "Bearer"})
        try:
            # Without configured audiences ``aud`` is judged after decoding (below).
            claims = await self._verifier.decode(token.strip(), audiences=self._claims.audiences,
                                                 issuer=self._claims.issuer)
        except jwt.PyJWKClientConnectionError as exc:
            log.warning("JWKS unreachable: %s", type(exc).__name__)
            raise Problem(503, "auth-keys-unavailable", "Authentication keys unavailable",
                          "The identity provider's keys could not be fetched; retry shortly.",
                          headers={"Retry-After": "5"}) from None
        except (jwt.InvalidAudienceError, jwt.InvalidIssuerError, jwt.MissingRequiredClaimError) as exc:
            # Raised only after the signature verified: the detail helps the storefront, not a forger.
            raise _invalid_token(_claim_detail(exc)) from None
        except jwt.PyJWTError:
            raise _invalid_token("The bearer token is not valid.") from None
        if claims.get("aud") and not self._claims.audiences and not self._claims.allow_any_audience:
            self._warn_unconfigured_audience()
            raise _invalid_token(
                "The token names an audience (aud) but this service has none configured, so it cannot "
                "tell whether the token is meant for it. The operator sets PAYCORE_JWT_AUDIENCE "
                "(or PAYCORE_JWT_ALLOW_ANY_AUDIENCE=true).")
        sub = usable_subject(claims.get("sub"))
        if sub is None:
            raise _invalid_token("The token has no usable subject.")
        return sub

    def _warn_unconfigured_audience(self) -> None:
        if not self._warned_unconfigured_audience:  # once: every such request would repeat it
            self._warned_unconfigured_audience = True
            log.warning("refusing customer tokens that name an audience (aud): PAYCORE_JWT_AUDIENCE is "
                        "not set (or set PAYCORE_JWT_ALLOW_ANY_AUDIENCE=true)")


def _claim_detail(exc: jwt.PyJWTError) -> str:
    claim = exc.claim if isinstance(exc, jwt.MissingRequiredClaimError) else None
    if isinstance(exc, jwt.InvalidAudienceError) or claim == "aud":
        return "The token is not meant for this service: its audience (aud) is missing or names another."
    if isinstance(exc, jwt.InvalidIssuerError) or claim == "iss":
        return "The token was not issued by the configured issuer (iss)."
    return "The bearer token is not valid."
