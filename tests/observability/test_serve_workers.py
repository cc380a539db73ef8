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

from bench.common import RawHTTP
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
            # The request histogram is observed once the response has gone out, so the last
            # payment's sample may land just after the client has its answer: poll for it.
            paid_route = 'method="POST",route="/orders/{order_id}/payment",service="checkout",status="200"'
            paid_sample = f"paycore_http_request_duration_seconds_count{{{paid_route}}}"
            async with asyncio.timeout(10):
                while _value(text, paid_sample) < paid:
                    text = (await http.get(f"http://127.0.0.1:{admin}/metrics")).text
            assert _value(text, paid_sample) == paid

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


# --- One listening socket per worker (SO_REUSEPORT) -------------------------------------------

BURST = 24  # connections opened at once: all on one worker by chance has probability 2 / 2**24


async def _keep_alive_requests(port: int, requests: int) -> int:
    """One keep-alive connection sending ``requests`` GET /healthz in turn; how many got 200."""
    async with RawHTTP(port) as connection:
        return sum([(await connection.request("GET", "/healthz"))[0] == 200 for _ in range(requests)])


async def _requests_by_worker(http: httpx.AsyncClient, admin: int) -> dict[str, float]:
    text = (await http.get(f"http://127.0.0.1:{admin}/metrics")).text
    return {pid: float(v) for pid, v in WORKER_REQUESTS.findall(text)}


def _checkout_env(db_dsn: str, admin: int) -> dict[str, str]:
    return {"PAYCORE_DATABASE_URL": db_dsn, "PAYCORE_JWT_SECRET": JWT_SECRET,
            "PAYCORE_CARDCO_BASE_URL": "http://127.0.0.1:9", **CARDCO, "PAYCORE_METRICS_PORT": str(admin)}


async def test_a_burst_of_keep_alive_connections_is_spread_over_the_workers(db_dsn: str) -> None:
    # Each worker has a listening socket of its own and the kernel spreads new connections
    # over them by a hash. (On uvicorn's one shared socket the first worker to wake could
    # accept a whole burst: the bench's four keep-alive connections, one worker idle.)
    public, admin = free_port(), free_port()
    async with paycore("serve", "checkout", "--workers", "2", "--port", str(public),
                       env=_checkout_env(db_dsn, admin)) as proc, httpx.AsyncClient(timeout=30) as http:
        await answered(http, f"http://127.0.0.1:{admin}/healthz", proc, containing="2 of 2", within_s=45)
        before = await _requests_by_worker(http, admin)
        async with asyncio.timeout(60):
            answered_ok = await asyncio.gather(*(_keep_alive_requests(public, 5) for _ in range(BURST)))
        assert sum(answered_ok) == BURST * 5
        after = await _requests_by_worker(http, admin)
        served = {pid: after[pid] - before.get(pid, 0.0) for pid in after}
        assert len([pid for pid, n in served.items() if n > 0]) == 2, served
        assert sum(served.values()) == BURST * 5, served


async def test_a_dead_workers_replacement_serves_its_socket_and_nothing_waits_forever(db_dsn: str) -> None:
    public, admin = free_port(), free_port()
    async with paycore("serve", "checkout", "--workers", "2", "--port", str(public),
                       env=_checkout_env(db_dsn, admin)) as proc, httpx.AsyncClient(timeout=30) as http:
        await answered(http, f"http://127.0.0.1:{admin}/healthz", proc, containing="2 of 2", within_s=45)
        async with asyncio.timeout(60):
            await asyncio.gather(*(_keep_alive_requests(public, 1) for _ in range(BURST)))
        original = set(await _requests_by_worker(http, admin))
        os.kill(int(next(iter(original))), signal.SIGKILL)
        # The supervisor replaces it on the dead worker's socket, which it kept open: every new
        # connection is answered, those the kernel hashes to that socket included.
        async with asyncio.timeout(60):
            while True:
                replacement = set(await _requests_by_worker(http, admin)) - original
                health = await http.get(f"http://127.0.0.1:{admin}/healthz")
                if replacement and health.text == "ok: 2 of 2 workers":
                    break
                await asyncio.sleep(0.1)  # polling the supervisor's restart, bounded by the timeout
            answered_ok = await asyncio.gather(*(_keep_alive_requests(public, 1) for _ in range(BURST)))
        assert sum(answered_ok) == BURST


async def test_a_second_supervisor_on_a_port_in_use_is_refused(db_dsn: str) -> None:
    public, admin, admin2 = free_port(), free_port(), free_port()
    async with paycore("serve", "checkout", "--workers", "2", "--port", str(public),
                       env=_checkout_env(db_dsn, admin)) as proc, httpx.AsyncClient(timeout=30) as http:
        await answered(http, f"http://127.0.0.1:{admin}/healthz", proc, containing="2 of 2", within_s=45)
        # SO_REUSEPORT would let the same user's second group join the port and take part of
        # the connections; the supervisor's plain bind first refuses it, as for one process.
        async with paycore("serve", "checkout", "--workers", "2", "--port", str(public),
                           env=_checkout_env(db_dsn, admin2)) as second:
            async with asyncio.timeout(30):
                assert await second.wait() != 0
        assert (await http.get(f"http://127.0.0.1:{admin}/healthz")).text == "ok: 2 of 2 workers"
