"""``paycore token``: a local development JWT for a customer."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from paycore.config import load_settings
from paycore_cli.common import JWT_SECRET_FILE, STATE_DIR, CommandError, local_jwt_secret, paycore_home


def cmd_token(args: argparse.Namespace) -> int:
    import jwt

    from paycore.clock import SystemClock

    settings = load_settings(require_account=False)
    if settings.jwt_secret is not None:
        secret = settings.jwt_secret.reveal()
    else:
        # Never a new secret here: one the running services do not know signs useless tokens.
        home = paycore_home()
        found = local_jwt_secret(home, create=False) if home is not None else None
        if found is None:
            where = f"{home / JWT_SECRET_FILE}" if home is not None else (
                f"no {STATE_DIR}/ in {Path.cwd()} or its parents")
            raise CommandError(f"no local JWT secret ({where}): "
                               "run `make run` (or `paycore up`) first, or set PAYCORE_JWT_SECRET")
        secret = found
    if settings.jwks_url is not None:
        print("paycore: warning: PAYCORE_JWKS_URL is set; services may not accept "
              "locally signed HS256 tokens", file=sys.stderr)
    now = int(SystemClock().now().timestamp())
    claims = {"sub": args.customer_id, "iat": now, "exp": now + args.ttl}
    print(jwt.encode(claims, secret, algorithm="HS256"))
    return 0
