"""``paycore health``: the container's health check, probing this container's own service.

The image's ``HEALTHCHECK`` runs it, so it needs neither curl nor a shell: it asks
``http://127.0.0.1:$PAYCORE_HEALTH_PORT/healthz`` (the service's port, or a worker's
``--metrics-port``) and exits 0 on 200, 1 otherwise, saying why in one line.
"""

from __future__ import annotations

import argparse
import http.client
import os
import urllib.error
import urllib.request

from paycore_cli.common import HEALTH_PORT, LOOPBACK, CommandError


def health_url(port: int) -> str:
    return f"http://{LOOPBACK}:{port}/healthz"


def cmd_health(args: argparse.Namespace) -> int:
    url: str = args.url or health_url(HEALTH_PORT.read(os.environ))
    try:
        with urllib.request.urlopen(url, timeout=args.timeout) as response:
            status: int = response.status
            body = response.read(200)
    except urllib.error.HTTPError as exc:  # a status other than 2xx/3xx: the service says why
        status, body = exc.code, exc.read(200)
    except (urllib.error.URLError, http.client.HTTPException, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise CommandError(f"health: {url}: no answer ({reason})") from None
    text = body.decode("utf-8", "replace").strip().splitlines()[0] if body.strip() else ""
    if status != 200:
        raise CommandError(f"health: {url} answered {status}: {text}")
    print(f"healthy: {url} answered 200 {text}".rstrip())
    return 0
