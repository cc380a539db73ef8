"""``paycore serve checkout --workers 2``: two real worker processes on one port, one admin port.

The supervisor's admin port aggregates both workers' counters (prometheus_client's
multiprocess mode), its /healthz counts live workers, and SIGTERM stops every process.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal

import httpx
import pytest

from harness.servers import free_port, serve_asgi
from paycore_cli.parser import build_parser
from paycore_sandbox.app import create_app as create_sandbox_app
from paycore_sandbox.settings import SandboxSettings
from tests.observability.test_admin_ports import CARDCO, answered, paycore
from tests.support.stack import JWT_SECRET, Shop

WORKER_REQUESTS = re.compile(r'^paycore_http_worker_requests\{pid="(\d+)",service="checkout"\} (\S+)$', re.M)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _value(text: str, sample: str) -> float:
    match = re.search(rf"^{re.escape(sample)} (\S+)$", text, re.M)
    assert match, f"{sample} not in /metrics"
    return float(match.group(1))


async def test_two_workers_share_the_port_and_one_admin_port_aggregates_them(db_dsn: str) -> None:
    public, admin = free_port(), free_port()
    async with serve_asgi(create_sandbox_app(SandboxSettings.default())) as sandbox_url:
        env = {"PAYCORE_DATABASE_URL": db_dsn, "PAYCORE_JWT_SECRET": JWT_SECRET,
               "PAYCORE_CARDCO_BASE_URL": sandbox_url, **CARDCO, "PAYCORE_METRICS_PORT": str(admin)}
        async with paycore("serve", "checkout", "--workers", "2", "--port", str(public), env=env) as proc, \
                httpx.AsyncClient(timeout=30) as http:
            health = await answered(http, f"http://127.0.0.1:{admin}/healthz", proc, containing="2 of 2",
                                    within_s=45)
            assert health.text == "ok: 2 of 2 workers"
            await answered(http, f"http://127.0.0.1:{public}/healthz", proc)

            # Payments on fresh connections until both workers have answered some (the kernel
            # hands each accepted connection to one of them), bounded by a deadline.
            paid = 0
            pids: dict[str, float] = {}
            async with asyncio.timeout(30):
                while len(pids) < 2 or paid < 4:
                    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{public}", timeout=30,
                                                 headers={"Connection": "close"}) as fresh:
                        shop = Shop(fresh, "cus_alice")
                        response = await shop.pay(await shop.create_order())
                        assert response.status_code == 200 and response.json()["state"] == "Succeeded"
                        paid += 1
                    text = (await http.get(f"http://127.0.0.1:{admin}/metrics")).text
                    pids = {pid: float(v) for pid, v in WORKER_REQUESTS.findall(text) if float(v) > 0}
            assert str(proc.pid) not in pids  # the supervisor serves no request itself

            # One sum over both workers, not either worker's share.
            assert _value(text, "paycore_checkout_attempts_created_total") == paid
            assert _value(text, 'paycore_checkout_outcomes_total{reason="",state="Succeeded"}') == paid
            assert _value(text, 'paycore_http_workers{service="checkout"}') == 2
            paid_route = 'method="POST",route="/orders/{order_id}/payment",service="checkout",status="200"'
            assert _value(text, f"paycore_http_request_duration_seconds_count{{{paid_route}}}") == paid

            proc.send_signal(signal.SIGTERM)
            async with asyncio.timeout(20):
                assert await proc.wait() == 0
                while any(_alive(int(pid)) for pid in pids):  # noqa: ASYNC110 -- polls the worker pids
                    await asyncio.sleep(0.05)


def test_workers_is_offered_where_a_service_can_share_its_port() -> None:
    parser = build_parser()
    assert parser.parse_args(["serve", "checkout", "--workers", "2"]).workers == 2
    assert parser.parse_args(["serve", "webhooks"]).workers == 1
    for refused in (["serve", "checkout", "--workers", "0"], ["serve", "sandbox", "--workers", "2"],
                    ["serve", "console", "--workers", "2"]):
        with pytest.raises(SystemExit):
            parser.parse_args(refused)
