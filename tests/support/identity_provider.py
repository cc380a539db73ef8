"""An identity provider as a real HTTP server: it signs tokens and publishes a JWKS.

Checkout fetches the key set over HTTP exactly as in production; a test can
rotate keys, take the set down, or shape tokens like a given provider's.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

JWKS_PATH = "/.well-known/jwks.json"


@dataclass
class IdentityProvider:
    """Signs customer tokens and publishes the public keys as a JWKS."""

    keys: dict[str, Any] = field(default_factory=dict)  # kid -> private key
    published: set[str] = field(default_factory=set)
    down: bool = False
    fetches: int = 0
    # Claims every ``token()`` carries, e.g. the ``iss`` and ``aud`` checkout is configured for.
    claims: dict[str, Any] = field(default_factory=dict)

    def add_rsa_key(self, kid: str, *, publish: bool = True) -> None:
        self.keys[kid] = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        if publish:
            self.published.add(kid)

    def add_ec_key(self, kid: str) -> None:
        self.keys[kid] = ec.generate_private_key(ec.SECP256R1())
        self.published.add(kid)

    def sign(self, claims: dict[str, Any], kid: str, *, typ: str = "JWT") -> str:
        """Any claims, signed by the key ``kid`` (RS256 or ES256 by key type)."""
        key = self.keys[kid]
        algorithm = "ES256" if isinstance(key, ec.EllipticCurvePrivateKey) else "RS256"
        return jwt.encode(claims, key, algorithm=algorithm, headers={"kid": kid, "typ": typ})

    def token(self, customer: str, kid: str, *, exp_in_s: int = 3600) -> str:
        now = int(time.time())
        return self.sign({**self.claims, "sub": customer, "iat": now, "exp": now + exp_in_s}, kid)

    def jwks(self) -> dict[str, Any]:
        published = []
        for kid in sorted(self.published):
            key = self.keys[kid]
            if isinstance(key, ec.EllipticCurvePrivateKey):
                jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key()))
                jwk["alg"] = "ES256"
            else:
                jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
                jwk["alg"] = "RS256"
            published.append({**jwk, "kid": kid, "use": "sig"})
        return {"keys": published}

    def app(self, path: str = JWKS_PATH) -> Starlette:
        """The key set served at ``path`` (Keycloak and Auth0 publish it at different paths)."""

        async def keys(request: Request) -> Response:
            self.fetches += 1
            if self.down:
                return Response("unavailable", status_code=503)
            return JSONResponse(self.jwks())

        return Starlette(routes=[Route(path, keys)])
