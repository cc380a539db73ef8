"""The chaos run's system: every service up, a payment through it, kills survived, nothing left behind.

One real stack (embedded PostgreSQL, Tansu, every service as a process) per
test: starting it costs about 20 s, so the checks share it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import jwt
import psutil
import pytest

from paycore_devstack.chaos import kills
from paycore_devstack.chaos.load import Progress
from paycore_devstack.chaos.model import ChaosOptions, Endpoints, RunRecord
from paycore_devstack.chaos.providers import PROVIDERS
from paycore_devstack.chaos.run import run_chaos
from paycore_devstack.chaos.stack import CHAOS_ENV, ChaosStack, ChaosStackError
from paycore_devstack.up import sandbox_provider_env
from tests.support.stack import eventually
from tests.support.up import wait_gone


def _auth(endpoints: Endpoints, customer: str) -> dict[str, str]:
    now = int(time.time())
    token = jwt.encode({"sub": customer, "iat": now, "exp": now + 600}, endpoints.jwt_secret,
                       algorithm="HS256")
    return {"Authorization": f"Bearer {token}"}


async def _pay(http: httpx.AsyncClient, endpoints: Endpoints, checkout: str, customer: str) -> str:
    """Create an order and pay it with tok_visa; returns the state the payment ends in."""
    auth = _auth(endpoints, customer)
    created = await http.post(f"{checkout}/orders", json={"amount_minor": 1999, "currency": "EUR"},
                              headers=auth)
    assert created.status_code == 201, created.text
    order_id = created.json()["order_id"]
    paid = await http.post(f"{checkout}/orders/{order_id}/payment", json={"payment_method": "tok_visa"},
                           headers=auth)
    assert paid.status_code in (200, 202), paid.text
    state: str = paid.json()["state"]
    return state


async def _status(http: httpx.AsyncClient, url: str) -> int | None:
    try:
        return (await http.get(url)).status_code
    except httpx.HTTPError:
        return None


@pytest.mark.slow
async def test_the_stack_runs_every_service_survives_kills_and_a_database_crash_and_leaves_nothing(
        embedded_dir: Path) -> None:
    options = ChaosOptions(out_dir=embedded_dir, seed=7)
    record = RunRecord(options)
    seen: dict[str, set[int]] = {}

    def note_pids(stack: ChaosStack) -> None:
        for name, pid in stack.pids().items():
            seen.setdefault(name, set()).add(pid)

    async with ChaosStack(options, record) as stack, httpx.AsyncClient(timeout=15, trust_env=False) as http:
        endpoints = stack.endpoints
        note_pids(stack)
        assert stack.run_dir.parent == embedded_dir and stack.run_dir.name.endswith("-seed7")
        assert (stack.run_dir / "pg" / "PG_VERSION").exists()
        assert stack.kinds() == {
            "webhooks": ["webhooks"], "checkout": ["checkout-1", "checkout-2"],
            "recovery": ["recovery-1", "recovery-2"], "dispatcher": ["dispatcher"],
            "consumer": ["consumer-fulfillment", "consumer-email"],
        }
        for name in (*stack.kinds()["checkout"], *stack.kinds()["consumer"], "sandbox"):
            assert (stack.run_dir / "logs" / f"{name}.log").exists()
        for url in (*endpoints.checkout_urls, endpoints.intake_url):
            assert await _status(http, url + "/healthz") == 200
        assert await _status(http, endpoints.sandbox_url + "/_sandbox/payments") == 200
        assert endpoints.provider_account == "cardco:acct_store:test"
        assert endpoints.webhook_secret.startswith("whsec_") and len(endpoints.jwt_secret) >= 32

        # A payment through the first checkout, against the sandbox.
        assert await _pay(http, endpoints, endpoints.checkout_urls[0], "cust-before") == "Succeeded"

        # A checkout killed comes back on its port with a new process.
        before = stack.pids()["checkout-1"]
        await stack.kill("checkout-1")
        note_pids(stack)
        assert stack.pids()["checkout-1"] != before and not psutil.pid_exists(before)
        assert await _status(http, endpoints.checkout_urls[0] + "/healthz") == 200

        # Kills at once: of different instances side by side, of one instance in turn.
        workers = stack.pids()
        await asyncio.gather(stack.kill("consumer-fulfillment"), stack.kill("recovery-1"),
                             stack.kill("recovery-1"))
        note_pids(stack)
        for name in ("consumer-fulfillment", "recovery-1"):
            assert stack.pids()[name] != workers[name] and not psutil.pid_exists(workers[name])
        restarts = [i for i in record.incidents if i.kind == "restart"]
        assert sorted(i.target for i in restarts) == [
            "checkout-1", "consumer-fulfillment", "recovery-1", "recovery-1"]

        # The database killed with kill -9 comes back on the same data; the checkouts
        # find it again by themselves and take payments.
        postmaster = stack.pids()["postgres"]
        await stack.kill_database(2)
        note_pids(stack)
        assert stack.pids()["postgres"] != postmaster
        for url in endpoints.checkout_urls:
            await eventually(lambda url=url: _ready(http, url), within_s=30, what=f"{url}/readyz 200")
        assert await _pay(http, endpoints, endpoints.checkout_urls[0], "cust-after") == "Succeeded"
        assert await _pay(http, endpoints, endpoints.checkout_urls[1], "cust-after-2") == "Succeeded"

        assert stack.exited_on_own() == [], record.incidents
        assert [(i.kind, i.target) for i in record.incidents][-2:] == [
            ("db-kill", "postgres"), ("db-restart", "postgres")]
        assert len(record.incidents) == 2 * 4 + 2  # nothing exited on its own

        # A process that dies without the stack's doing is noticed, and not restarted.
        email = stack.pids()["consumer-email"]
        os.kill(email, signal.SIGKILL)
        await eventually(lambda: _true(bool(stack.exited_on_own())), what="the exit noticed")
        assert stack.exited_on_own() == [("consumer-email", -signal.SIGKILL)], record.incidents
        assert record.incidents[-1].kind == "exited" and record.incidents[-1].target == "consumer-email"
        assert stack.pids()["consumer-email"] == email
        note_pids(stack)

    everything = sorted(pid for pids in seen.values() for pid in pids)
    left = await wait_gone([p for p in map(_process, everything) if p is not None], within_s=15)
    assert left == [], f"still running after the stack stopped: {left}"


async def _ready(http: httpx.AsyncClient, url: str) -> bool:
    return await _status(http, url + "/readyz") == 200


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


@pytest.mark.slow
async def test_a_service_that_cannot_start_fails_the_run_with_its_log_a_report_and_nothing_running(
        embedded_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: set[tuple[str, int]] = set()
    real_service = ChaosStack._service

    def broken_email(self: ChaosStack, name: str, kind: str, argv: list[str], **kw: object) -> object:
        if name == "consumer-email":  # the last to start: everything else is up by then
            argv = [sys.executable, "-c", "import sys; print('no broker for me'); sys.exit(3)"]
        return real_service(self, name, kind, argv, **kw)  # type: ignore[arg-type]

    real_start = ChaosStack._start_service

    async def noting(self: ChaosStack, service: Any) -> None:
        try:
            await real_start(self, service)
        finally:
            started.update(self.pids().items())

    monkeypatch.setattr(ChaosStack, "_service", broken_email)
    monkeypatch.setattr(ChaosStack, "_start_service", noting)
    record = await run_chaos(ChaosOptions(out_dir=embedded_dir, seed=5))

    error = record.extra["error"]
    assert re.match(r"(?s)ChaosStackError: consumer-email exited before it was ready.*no broker",
                    error), error
    assert not record.clean and record.results == []
    assert {"postgres", "tansu", "checkout-1", "consumer-fulfillment"} <= {name for name, _ in started}
    left = await wait_gone([p for _, pid in started if (p := _process(pid)) is not None], within_s=15)
    assert left == [], f"still running after the failed start: {left}"
    # What it has is written all the same, next to the logs that say why.
    report_file = Path(record.extra["report_dir"]) / "chaos-report.json"
    assert report_file.parent.parent == embedded_dir and report_file.parent.name.endswith("-seed5")
    body = json.loads(report_file.read_text())
    assert body["error"] == error and body["clean"] is False
    assert (report_file.parent / "logs" / "consumer-email.log").exists()
    assert (report_file.parent / "chaos-table.txt").read_text().startswith("THE RUN FAILED: ChaosStackError")


KINDS = {"checkout": ["checkout-1", "checkout-2"], "webhooks": ["webhooks"],
         "recovery": ["recovery-1", "recovery-2"], "dispatcher": ["dispatcher"],
         "consumer": ["consumer-fulfillment", "consumer-email"]}


def test_the_kill_plan_is_the_seeds_each_kind_killed_n_times_mid_load_and_the_database_once() -> None:
    options = ChaosOptions(kills=3, seed=11)
    plan = kills.plan(KINDS, options)
    assert plan == kills.plan(dict(reversed(KINDS.items())), options)  # the seed's, whatever the order
    assert plan != kills.plan(KINDS, ChaosOptions(kills=3, seed=12))
    assert [k.at for k in plan] == sorted(k.at for k in plan)
    service_kills = [k for k in plan if k.target != "postgres"]
    for kind, instances in KINDS.items():
        killed = [k.target for k in service_kills if k.target in instances]
        assert len(killed) == 3, kind
        assert set(killed) == set(instances), kind  # round the instances: every one dies
    # One kill per kind: the seed picks which instance; over seeds, each of them.
    for kind, instances in KINDS.items():
        picked = {k.target for seed in range(20) for k in kills.plan(KINDS, ChaosOptions(kills=1, seed=seed))
                  if k.target in instances}
        assert picked == set(instances), kind
    assert all(0.05 < k.at < 0.85 and k.down_s is None for k in service_kills)
    [db] = [k for k in plan if k.target == "postgres"]
    assert 0.3 < db.at < 0.7 and db.down_s is not None and 2 < db.down_s < 5
    assert all(k.target != "postgres" for k in kills.plan(KINDS, ChaosOptions(db_kill=False)))


class _Killed:
    """Stands in for the stack's kill side only; the real stack's kills are tested above."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.calls: list[tuple[str, float]] = []
        self.release = asyncio.Event()

    def kinds(self) -> dict[str, list[str]]:
        return KINDS

    async def kill(self, instance: str) -> None:
        self.calls.append((instance, self.progress.fraction))
        await self.release.wait()

    async def kill_database(self, down_s: float) -> None:
        self.calls.append(("postgres", self.progress.fraction))
        await self.release.wait()


async def test_kills_follow_the_progress_without_waiting_for_each_other_and_stop_with_the_load() -> None:
    options = ChaosOptions(orders=100, kills=2, seed=3)
    record = RunRecord(options)
    progress = Progress(total=100)
    stack = _Killed(progress)
    plan = kills.plan(KINDS, options)
    half = [k for k in plan if k.at <= 0.5]
    running = asyncio.create_task(kills.run(stack, options, record, progress))  # type: ignore[arg-type]
    for _ in range(50):
        await progress.advance()
    await eventually(lambda: _true(len(stack.calls) == len(half)), what="the first half's kills")
    # None has finished (release is not set), yet every one due has started.
    assert [target for target, _ in stack.calls] == [k.target for k in half]
    assert all(at >= k.at for (_, at), k in zip(stack.calls, half, strict=True))
    progress.finished.set()  # the load ends at 50 %: the rest of the plan is dropped ...
    await asyncio.sleep(0)
    assert not running.done()  # ... but the kills under way are waited for
    stack.release.set()
    await asyncio.wait_for(running, timeout=10)
    assert len(stack.calls) == len(half) < len(plan)
    entries = record.extra["kill_plan"]
    assert [k["target"] for k in entries] == [k.target for k in plan]
    # What happened to each: the ones made, and the rest, shown as not carried out.
    assert [k["outcome"] for k in entries[:len(half)]] == ["carried out"] * len(half)
    assert {k["outcome"] for k in entries[len(half):]} == {"not carried out: the load ended at 50%"}
    assert kills.not_carried_out(record) == entries[len(half):]


async def test_a_kill_that_fails_is_recorded_as_not_carried_out() -> None:
    options = ChaosOptions(orders=10, kills=1, seed=3, db_kill=False)
    record = RunRecord(options)
    progress = Progress(total=10)

    class Failing(_Killed):
        async def kill(self, instance: str) -> None:
            raise ChaosStackError(f"{instance} did not come back")

    running = asyncio.create_task(kills.run(Failing(progress), options, record, progress))  # type: ignore[arg-type]
    for _ in range(10):
        await progress.advance()
    progress.finished.set()
    await asyncio.wait_for(running, timeout=10)
    outcomes = {k["outcome"] for k in record.extra["kill_plan"]}
    assert outcomes == {f"failed: ChaosStackError: {k['target']} did not come back"
                        for k in record.extra["kill_plan"]}


async def _true(value: bool) -> bool:
    return value


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_the_runs_timings_put_deadlines_inside_the_run_and_every_resend_inside_the_providers_window(
        provider: str) -> None:
    from paycore.config import load_settings
    from paycore_recovery.settings import load_recovery_settings
    from paycore_sandbox.dialects.adyen_wire import KEY_RETENTION_S as ADYEN_SANDBOX_RETENTION_S
    from paycore_sandbox.settings import SandboxSettings

    env = {**CHAOS_ENV, "PAYCORE_DEFAULT_PROVIDER": provider,
           **sandbox_provider_env(provider, "http://127.0.0.1:1", "http://127.0.0.1:2")}
    settings = load_settings(env)  # valid values, consistent with each other
    recovery = load_recovery_settings(settings, env)  # the lease outlives a worst-case pass
    [account] = settings.accounts  # the run configures its one provider, nothing else
    assert account.provider == provider == settings.default_account.provider
    sandbox = SandboxSettings.from_env(env)
    kept_s = ADYEN_SANDBOX_RETENTION_S if provider == "adyen" else sandbox.key_retention_s
    assert kept_s >= account.key_retention_s  # every resend before the deadline is inside the window
    assert account.key_retention_s - account.escalation_margin_s == 90
    # A Search miss is evidence only once the sandbox's index lag has surely passed.
    assert settings.budgets.call_s + recovery.search_lag_s > sandbox.stripe_search_lag_s
