"""Every log line a whole scenario writes is JSON and holds no secret, token or card number.

``paycore up`` runs every service as a process (sandbox, checkout, webhook intake,
recovery, dispatcher, console) on the test database, logging at DEBUG in JSON. Through
it: a payment that succeeds (and its webhook), one whose answer is mangled so it ends
Unknown and is then resolved by evidence, requests with good, missing and garbage
``X-Request-Id``. Then every line is parsed and scanned for what must never be logged
(the rule in docs/operations.md, Logs).
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx
import jwt
import orjson

from paycore_cli.common import UP_SERVICES
from paycore_devstack.chaos.stack import CHAOS_ENV
from paycore_sandbox.dialects import adyen_webhooks
from paycore_sandbox.settings import SandboxSettings
from tests.support.stack import eventually
from tests.support.up import BANNER_END, running_up, up_env

# The short timings the chaos run uses (docs/chaos.md), so recovery acts within seconds.
FAST_PREFIXES = ("PAYCORE_RECOVERY", "PAYCORE_RECHECK", "PAYCORE_PROCESSING", "PAYCORE_SANDBOX_WEBHOOK")
FAST = {k: v for k, v in CHAOS_ENV.items() if k.startswith(FAST_PREFIXES)}
PREFIXED = re.compile(r"^(?P<service>[a-z]+) +\| (?P<line>.*)$")
# A run of 13-19 digits, alone or in groups joined by a space or dash, not part of a longer word
# nor the fraction of a decimal number (a timer's drift=0.9998985270012781 is not a card).
DIGITS = re.compile(r"(?<![0-9A-Za-z_])(?<![0-9]\.)[0-9](?:[ -]?[0-9]){12,18}(?![0-9A-Za-z_])")
NOW_MS_WINDOW = 10 * 86_400_000  # epoch milliseconds near now are timestamps, not cards


def luhn_valid(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


def card_like(text: str) -> list[str]:
    found = []
    for match in DIGITS.finditer(text):
        digits = re.sub(r"[ -]", "", match.group())
        if len(digits) == 13 and abs(int(digits) - time.time() * 1000) < NOW_MS_WINDOW:
            continue
        if luhn_valid(digits):
            found.append(match.group())
    return found


def leaks(lines: Iterable[str], secrets: dict[str, str]) -> list[str]:
    """What must never be in a log line: each secret, a bearer or Authorization header, a card."""
    found = []
    for line in lines:
        for what, secret in secrets.items():
            if secret and secret in line:
                found.append(f"{what} in {line[:300]}")
        if re.search(r"(?i)bearer\s+[A-Za-z0-9._-]{8,}|authorization['\"]?\s*[:=]", line):
            found.append(f"an Authorization header in {line[:300]}")
        found += [f"card-like {c!r} in {line[:300]}" for c in card_like(line)]
    return found


def parsed(lines: list[str]) -> list[dict[str, Any]]:
    """Each service's line as JSON (the banner ``up`` prints is not a log line)."""
    records = []
    for line in lines:
        match = PREFIXED.match(line.rstrip("\n"))
        if match is None or match["service"] not in UP_SERVICES:
            continue
        try:
            record = orjson.loads(match["line"])
        except orjson.JSONDecodeError:
            raise AssertionError(f"not a JSON log line: {line!r}") from None
        assert isinstance(record, dict), line
        records.append(record)
    return records


def test_the_scan_catches_each_kind_of_leak() -> None:
    """Red first: the scanner finds what it is for (and leaves ids and timestamps alone)."""
    secrets = {"JWT": "eyJhbGciOi.payload.sig"}
    assert leaks(['{"message":"token eyJhbGciOi.payload.sig"}'], secrets)
    assert leaks(['{"message":"sending Authorization: xyz"}'], {})
    assert leaks(['{"message":"Bearer abcdefghijk"}'], {})
    assert leaks(['{"message":"card 4242 4242 4242 4242"}'], {})
    assert leaks(['{"message":"card 4000-0000-0000-0002"}'], {})
    clean = [f'{{"ts":"x","n":{int(time.time() * 1000)},"attempt_id":"0f1e2d3c4b5a69788796a5b4c3d2e1f0",'
             '"order_id":"ord_7Qm2","message":"port 43151 pid 1234567 new_interval=0.9998985270012781"}']
    assert leaks(clean, secrets) == []


def _token(secret: str, customer: str) -> str:
    now = int(time.time())
    return jwt.encode({"sub": customer, "iat": now, "exp": now + 600}, secret, algorithm="HS256")


async def _order(http: httpx.AsyncClient, checkout: str, auth: dict[str, str]) -> str:
    created = await http.post(f"{checkout}/orders", json={"amount_minor": 2599, "currency": "EUR"},
                              headers=auth)
    assert created.status_code == 201, created.text
    order_id: str = created.json()["order_id"]
    return order_id


async def test_a_whole_scenario_logs_json_lines_without_secrets(tmp_path: Path, db_dsn: str) -> None:
    home = tmp_path / "home"
    env = up_env(home=home, database_url=db_dsn, PAYCORE_LOG_FORMAT="json", PAYCORE_LOG_LEVEL="DEBUG",
                 PAYCORE_CALL_BUDGET_S="2", **FAST)
    async with running_up(tmp_path, env) as up, httpx.AsyncClient(timeout=15, trust_env=False) as http:
        await up.wait_for(BANNER_END)
        checkout, sandbox = up.url("checkout"), up.url("sandbox")
        jwt_secret = (home / "jwt_secret").read_text().strip()
        token = _token(jwt_secret, "cus_logs")
        auth = {"Authorization": f"Bearer {token}"}

        # 1. A payment that succeeds; the sandbox delivers its webhook to the intake.
        paid_order = await _order(http, checkout, auth)
        paid = await http.post(f"{checkout}/orders/{paid_order}/payment", json={"payment_method": "tok_visa"},
                               headers={**auth, "X-Request-Id": "client-req.1"})
        assert paid.status_code == 200 and paid.json()["state"] == "Succeeded", paid.text
        assert paid.headers["x-request-id"] == "client-req.1"

        # 2. A payment whose answer is mangled: Unknown, then resolved by evidence. The
        # webhook is held back, so recovery's lookup is what resolves it.
        faults = await http.post(f"{sandbox}/_sandbox/faults", json={"rules": [
            {"fault": "malformed_body", "match": {"any": True, "operation": "create"}, "times": 1},
            {"fault": "webhook_delay", "match": {"any": True}, "times": 1, "delay_ms": 600_000}]})
        assert faults.status_code == 200, faults.text
        unknown_order = await _order(http, checkout, auth)
        unknown = await http.post(f"{checkout}/orders/{unknown_order}/payment",
                                  json={"payment_method": "tok_visa"}, headers=auth)
        assert unknown.json()["state"] == "Unknown", unknown.text

        async def resolved() -> bool:
            status = await http.get(f"{checkout}/orders/{unknown_order}/payment/status", headers=auth)
            return bool(status.json()["state"] == "Succeeded")

        await eventually(resolved, within_s=20, what="the Unknown payment resolved")

        # 3. Request ids: garbage is replaced, a missing one generated, errors carry one too (a
        # control byte never reaches the app: tests/observability/test_malformed_requests.py).
        garbage = await http.get(f"{checkout}/orders/{paid_order}",
                                 headers={**auth, "X-Request-Id": "a b;" + "x" * 200})
        assert garbage.status_code == 200 and re.fullmatch(r"[0-9a-f]{32}", garbage.headers["x-request-id"])
        refused = await http.get(f"{checkout}/orders/{paid_order}", headers={"Authorization": "Bearer nope"})
        assert refused.status_code == 401 and re.fullmatch(r"[0-9a-f]{32}", refused.headers["x-request-id"])

        up.process.send_signal(signal.SIGINT)
        assert await up.wait_exit(within_s=30) == 0, up.output()

    stdout, stderr = up.lines, up.stderr_path.read_text().splitlines()
    records = parsed(stdout)
    assert {r["service"] for r in records} >= {"checkout", "sandbox", "webhooks", "recovery", "dispatcher"}
    for record in records:
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", record["ts"]), record
        assert record["level"] in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"), record
    for line in stderr:  # `up`'s own lines
        assert isinstance(orjson.loads(line), dict), line
    # Correlation: the client's request id, and the Unknown order's lines from checkout and recovery.
    assert any(r.get("request_id") == "client-req.1" and r.get("order_id") == paid_order for r in records)
    about_unknown = {r["service"] for r in records if r.get("order_id") == unknown_order}
    assert {"checkout", "recovery"} <= about_unknown, about_unknown
    assert any(r["service"] == "webhooks" and r.get("order_id") == paid_order for r in records)
    # The relay names an attempt on the lines it writes about one (a failed or dead-lettered send:
    # tests/dispatcher/test_outbox_matrix.py); a healthy relay writes no line per row.

    [acct] = [a for a in SandboxSettings.default().accounts
              if a.account == "acct_store" and a.environment == "test"]
    secrets = {
        "the customer's JWT": token, "the JWT secret": jwt_secret,
        "the console secret": (home / "console_secret").read_text().strip(),
        "the provider API key": acct.api_key, "the webhook secret": acct.webhook_secret,
        "Adyen's HMAC key": adyen_webhooks.hmac_key(acct),
        "Adyen's webhook password": adyen_webhooks.webhook_password(acct),
    }
    log_lines = [line for line in stdout if PREFIXED.match(line)] + stderr
    assert leaks(log_lines, secrets) == []
    assert not [line for line in stdout if any(s in line for s in secrets.values())]  # nor the banner
