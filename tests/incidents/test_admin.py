"""The incident agent's admin port on its own: live while faust starts, ready only after.

The admin server is a mode service the worker starts before the faust app; here it runs
alone with a fake monotonic clock, so "recovery outlasts the liveness bound" is one
assignment, not a wait.
"""

from __future__ import annotations

import httpx
from prometheus_client import CollectorRegistry, Counter

from harness.servers import free_port
from paycore_incidents.admin import AdminServer, TimerLiveness


async def test_live_while_faust_starts_ready_once_the_timer_runs_then_stale_without_its_beat() -> None:
    now = [0.0]
    waiting: list[str] = ["faust is joining its group and recovering the incidents table"]
    timer = TimerLiveness(10.0, lambda: waiting[0] if waiting else None, monotonic=lambda: now[0])
    registry = CollectorRegistry()
    Counter("paycore_incident_pages", "pages", ["page"], registry=registry).labels("alert").inc()
    port = free_port()
    admin = AdminServer(registry, timer, "127.0.0.1", port)
    await admin.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:
            assert (await http.get("/healthz")).status_code == 200
            not_ready = await http.get("/readyz")
            assert not_ready.status_code == 503 and "recovering the incidents table" in not_ready.text
            assert 'paycore_incident_pages_total{page="alert"} 1.0' in (await http.get("/metrics")).text

            now[0] = 100.0  # recovery outlasts the timer's bound: still live, the process answers
            assert (await http.get("/healthz")).status_code == 200

            timer.beat()  # faust's first tick: it beats, and from then on it is ready
            waiting.clear()
            assert (await http.get("/readyz")).status_code == 200
            now[0] = 109.0
            assert (await http.get("/healthz")).status_code == 200
            now[0] = 111.0  # a bound without a beat: the timer is wedged
            stale = await http.get("/healthz")
            assert stale.status_code == 503 and "incident timer" in stale.text

            waiting.append("the consumer group is rebalancing")
            assert (await http.get("/readyz")).status_code == 503
    finally:
        await admin.stop()
