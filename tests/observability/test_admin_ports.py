"""Every process's /metrics and /healthz on its admin port, apart from its public API.

``paycore serve checkout``, ``paycore serve console`` and ``paycore run recovery`` as real processes, their
admin port from ``PAYCORE_METRICS_PORT`` (no flag: the admin server is on by
default); the request-duration histogram in process, labelled by route template.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import httpx
import orjson

from harness.servers import free_port, serve_asgi
from paycore.clock import FakeClock
from paycore.http.health_server import with_admin_server
from paycore_checkout.app import create_app as create_checkout_app
from paycore_sandbox.app import create_app as create_sandbox_app
from paycore_sandbox.settings import SandboxSettings
from tests.support.stack import JWT_SECRET, Shop, checkout_settings, eventually

CARDCO = {"PAYCORE_CARDCO_ACCOUNT": "acct_store", "PAYCORE_CARDCO_ENVIRONMENT": "test",
          "PAYCORE_CARDCO_API_KEY": "sk_test_acct_store_local"}


@contextlib.asynccontextmanager
async def paycore(*args: str, env: dict[str, str]) -> AsyncIterator[asyncio.subprocess.Process]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "paycore_cli", *args, env={**os.environ, "PAYCORE_LOG_LEVEL": "WARNING", **env},
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.terminate()
            async with asyncio.timeout(20):
                await proc.wait()


async def answered(http: httpx.AsyncClient, url: str, proc: asyncio.subprocess.Process,
                   *, containing: str = "", within_s: float = 30.0) -> httpx.Response:
    """Poll ``url`` until it answers 200 (with ``containing`` in its body) or the deadline passes."""
    async with asyncio.timeout(within_s):
        while True:
            assert proc.returncode is None, f"the process exited {proc.returncode}"
            with contextlib.suppress(httpx.TransportError):
                r = await http.get(url)
                if r.status_code == 200 and containing in r.text:
                    return r
            await asyncio.sleep(0.05)  # polling a starting process, bounded by the timeout


async def test_checkout_serves_metrics_on_its_admin_port_only(db_dsn: str) -> None:
    public, admin = free_port(), free_port()
    env = {"PAYCORE_DATABASE_URL": db_dsn, "PAYCORE_JWT_SECRET": JWT_SECRET,
           "PAYCORE_CARDCO_BASE_URL": "http://127.0.0.1:9", **CARDCO, "PAYCORE_METRICS_PORT": str(admin)}
    async with paycore("serve", "checkout", "--port", str(public), env=env) as proc, \
            httpx.AsyncClient(timeout=5) as http:
        await answered(http, f"http://127.0.0.1:{public}/healthz", proc)
        assert (await http.get(f"http://127.0.0.1:{public}/metrics")).status_code == 404
        health = await answered(http, f"http://127.0.0.1:{admin}/healthz", proc)
        assert health.text == "ok"
        text = (await answered(http, f"http://127.0.0.1:{admin}/metrics", proc)).text
        assert "paycore_checkout_attempts_created_total" in text
        # The public /metrics that answered 404 was timed like any request no route matched.
        assert ('paycore_http_request_duration_seconds_count{method="GET",route="<unmatched>",'
                'service="checkout",status="404"} 1.0') in text


async def test_the_console_serves_metrics_on_its_admin_port_only(db_dsn: str) -> None:
    public, admin = free_port(), free_port()
    env = {"PAYCORE_DATABASE_URL": db_dsn, "PAYCORE_CONSOLE_SECRET": "console-secret-for-tests-0123456789",
           "PAYCORE_METRICS_PORT": str(admin)}
    async with paycore("serve", "console", "--port", str(public), env=env) as proc, \
            httpx.AsyncClient(timeout=5) as http:
        await answered(http, f"http://127.0.0.1:{public}/healthz", proc)
        assert (await http.get(f"http://127.0.0.1:{public}/metrics")).status_code == 404
        assert (await answered(http, f"http://127.0.0.1:{admin}/healthz", proc)).text == "ok"
        text = (await answered(http, f"http://127.0.0.1:{admin}/metrics", proc,
                               containing='service="console"')).text
        assert ('paycore_http_request_duration_seconds_count{method="GET",route="/healthz",'
                'service="console",status="200"}') in text
        assert ('paycore_http_request_duration_seconds_count{method="GET",route="<unmatched>",'
                'service="console",status="404"} 1.0') in text


async def test_a_worker_serves_healthz_and_its_database_gauges_without_a_flag(db_dsn: str) -> None:
    admin = free_port()
    env = {"PAYCORE_DATABASE_URL": db_dsn, "PAYCORE_CARDCO_BASE_URL": "http://127.0.0.1:9", **CARDCO,
           "PAYCORE_METRICS_PORT": str(admin)}
    async with paycore("run", "recovery", env=env) as proc, httpx.AsyncClient(timeout=5) as http:
        text = (await answered(http, f"http://127.0.0.1:{admin}/metrics", proc,
                               containing="paycore_provider_scopes_paused 0.0")).text
        assert "paycore_attempts_past_escalation_deadline 0.0" in text
        assert "paycore_escalations_unacknowledged_oldest_age_seconds 0.0" in text
        assert (await answered(http, f"http://127.0.0.1:{admin}/healthz", proc)).text == "ok"


async def test_request_durations_are_labelled_by_route_template_never_by_id(
    pool: asyncpg.Pool, db_dsn: str
) -> None:
    clock = FakeClock(current=datetime.now(UTC))
    admin = free_port()
    async with serve_asgi(create_sandbox_app(SandboxSettings.default())) as sandbox_url:
        app = create_checkout_app(checkout_settings(sandbox_url, db_dsn), clock=clock, pool=pool)
        async with serve_asgi(with_admin_server(app, "127.0.0.1", admin, service="checkout")) as url, \
                httpx.AsyncClient(base_url=url, timeout=30) as http:
            shop = Shop(http, "cus_alice")
            order = await shop.create_order()
            assert (await shop.pay(order)).status_code == 200
            assert (await shop.status(order)).status_code == 200
            text = (await http.get(f"http://127.0.0.1:{admin}/metrics")).text
    labelled = re.findall(r'^paycore_http_request_duration_seconds_count\{(.*)\} (\S+)$', text, re.M)
    paid = 'method="POST",route="/orders/{order_id}/payment",service="checkout",status="200"'
    assert (paid, "1.0") in labelled
    assert ('method="GET",route="/orders/{order_id}/payment/status",service="checkout",status="200"',
            "1.0") in labelled
    assert order not in text  # no order id ever becomes a label value
    assert 'le="0.005"' in text and 'le="+Inf"' in text


async def test_a_request_line_is_found_by_its_request_id_with_the_admin_port_on(
    db_dsn: str, tmp_path: Path,
) -> None:
    """Started the default way (default log level, admin port on): the admin server must not quiet
    the process's request log (uvicorn set its loggers to WARNING, so no request line appeared)."""
    public, admin = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAYCORE_")}
    env.update(PAYCORE_DATABASE_URL=db_dsn, PAYCORE_JWT_SECRET=JWT_SECRET,
               PAYCORE_CARDCO_BASE_URL="http://127.0.0.1:9", **CARDCO, PAYCORE_METRICS_PORT=str(admin))
    log_path = tmp_path / "checkout.log"
    with log_path.open("wb") as log_file:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "paycore_cli", "serve", "checkout", "--port", str(public), env=env,
            stdout=asyncio.subprocess.DEVNULL, stderr=log_file)
        try:
            async with httpx.AsyncClient(timeout=5) as http:
                await answered(http, f"http://127.0.0.1:{admin}/healthz", proc)
                shop = Shop(http=httpx.AsyncClient(base_url=f"http://127.0.0.1:{public}", timeout=5),
                            customer="cus_support")
                await answered(http, f"http://127.0.0.1:{public}/healthz", proc)
                created = await shop.http.post("/orders", json={"amount_minor": 1250, "currency": "EUR"},
                                               headers={**shop.auth, "X-Request-Id": "support-case-42"})
                await shop.http.aclose()
                assert created.status_code == 201, created.text

                async def logged() -> list[dict[str, object]]:
                    written = log_path.read_bytes().rpartition(b"\n")[0]  # whole lines only
                    lines = [orjson.loads(line) for line in written.splitlines() if line.strip()]
                    return [line for line in lines if line.get("request_id") == "support-case-42"]

                found = await eventually(logged, what="a log line with the request id")
        finally:
            proc.terminate()
            async with asyncio.timeout(20):
                await proc.wait()
    access = [line for line in found if line["logger"] == "uvicorn.access"]
    assert access and "POST /orders" in str(access[0]["message"]) and "201" in str(access[0]["message"])


async def test_a_second_instance_on_the_same_admin_port_says_which_setting_moves_it(db_dsn: str) -> None:
    admin = free_port()
    env = {**os.environ, "PAYCORE_DATABASE_URL": db_dsn, "PAYCORE_CONSOLE_SECRET": "c" * 40,
           "PAYCORE_METRICS_PORT": str(admin), "PAYCORE_CARDCO_BASE_URL": "http://127.0.0.1:9", **CARDCO}
    async with paycore("serve", "console", "--port", str(free_port()), env=env) as first, \
            httpx.AsyncClient(timeout=5) as http:
        await answered(http, f"http://127.0.0.1:{admin}/healthz", first)
        for argv in (["serve", "console", "--port", str(free_port())], ["run", "recovery"]):
            second = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "paycore_cli", *argv, env=env, stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE)
            async with asyncio.timeout(30):
                _, err = await second.communicate()
            assert second.returncode == 1, err
            [line] = err.decode().splitlines()
            assert line.startswith("paycore: ") and f"127.0.0.1:{admin}" in line
            assert "PAYCORE_METRICS_PORT" in line and "--metrics-port" in line and "0 for none" in line
