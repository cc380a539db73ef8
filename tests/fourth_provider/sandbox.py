"""Payzo's wire as a real HTTP server (a Starlette app on a free port), with the faults the
conformance suite makes: at arrival (``drop_request``), after execution (``error_500_after``)
and on the way back (``lose_response``, ``delay``, ``malformed_body``, ``empty_body``).

It plays two test accounts, keeps each key's first answer (a same-key resend with the same
body is answered the same; with another body 422), and delivers each charge's webhook to the
subscribed URLs, signed as :mod:`tests.fourth_provider.provider` verifies.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from harness.servers import serve_asgi
from paycore.providers.package import ProviderAccountConfig
from tests.fourth_provider.provider import PROVIDER, signature

ACCOUNTS = {label: {"api_key": f"pz_test_{label}", "webhook_secret": f"pzwh_{label}"}
            for label in ("acct_store", "acct_other")}


@dataclass
class PayzoServer:
    url: str = ""
    index_lag_s: float = 0.0
    charges: dict[str, dict[str, Any]] = field(default_factory=dict)
    answers: dict[tuple[str, str], tuple[bytes, dict[str, Any]]] = field(default_factory=dict)
    faults: list[dict[str, Any]] = field(default_factory=list)
    requests: list[tuple[str, str, str]] = field(default_factory=list)
    hooks: list[str] = field(default_factory=list)
    offset_s: float = 0.0
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    # -- the ProviderServer controls --------------------------------------------------------------

    def account(self, label: str) -> ProviderAccountConfig:
        return PROVIDER.from_env(PROVIDER.sandbox_env(self.url, label, "test", ACCOUNTS[label], ""))

    async def fault(self, fault: str, *, operation: str = "create", delay_ms: int | None = None) -> None:
        self.faults.append({"fault": fault, "operation": operation, "delay_ms": delay_ms or 0})

    async def payments(self) -> list[dict[str, Any]]:
        return [{**c, "status": {"paid": "succeeded", "refused": "declined"}[c["state"]],
                 "provider_account": f"payzo:{c['account']}:test"} for c in self.charges.values()]

    async def received(self, method: str, path: str = "") -> list[str]:
        return [body for m, p, body in self.requests if m == method and p.startswith(path)]

    async def subscribe(self, url: str) -> None:
        self.hooks.append(url)

    async def now(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self.offset_s)

    async def advance(self, seconds: float) -> None:
        self.offset_s += seconds

    # -- the wire ---------------------------------------------------------------------------------

    def _account(self, request: Request) -> str | None:
        key = request.headers.get("authorization", "").removeprefix("Bearer ")
        return next((label for label, a in ACCOUNTS.items() if a["api_key"] == key), None)

    def _take(self, operation: str) -> dict[str, Any] | None:
        rule = next((f for f in self.faults if f["operation"] == operation), None)
        if rule is not None:
            self.faults.remove(rule)
        return rule

    async def create(self, request: Request) -> Response:
        body = await request.body()
        self.requests.append(("POST", request.url.path, body.decode()))
        account, key = self._account(request), request.headers.get("idempotency-key", "")
        if account is None:
            return JSONResponse({"error": "unauthorized"}, 401)
        rule = self._take("create") or {"fault": None}
        if rule["fault"] == "drop_request":
            return await hold(request)
        if (account, key) in self.answers:
            sent, charge = self.answers[account, key]
            if sent != body:
                return JSONResponse({"error": "key reused"}, 422)
        else:
            fields = orjson.loads(body)
            if not str(fields.get("source", "")).startswith("tok_"):
                return JSONResponse({"error": "invalid source"}, 400)
            charge = {"id": "pz_" + secrets.token_hex(8), "account": account, "test": True,
                      "reference": fields["reference"], "amount": fields["amount"],
                      "currency": fields["currency"],
                      "state": "refused" if fields["source"] == "tok_decline" else "paid"}
            self.charges[charge["id"]] = charge
            self.answers[account, key] = (body, charge)
            task = asyncio.create_task(self.notify(charge))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        return await answer(request, rule, charge)

    async def refund(self, request: Request) -> Response:
        body = await request.body()
        self.requests.append(("POST", request.url.path, body.decode()))
        account, key = self._account(request), request.headers.get("idempotency-key", "")
        charge = self.charges.get(request.path_params["id"])
        if account is None or charge is None or charge["account"] != account:
            return JSONResponse({"error": "no such charge"}, 404)
        rule = self._take("refund") or {"fault": None}
        if rule["fault"] == "drop_request":
            return await hold(request)
        if (account, key) not in self.answers:
            fields = orjson.loads(body)
            self.answers[account, key] = (body, {
                "id": "rf_" + secrets.token_hex(8), "charge": charge["id"], "reference": fields["reference"],
                "amount": fields["amount"], "currency": charge["currency"], "state": "done"})
        sent, refund = self.answers[account, key]
        if sent != body:
            return JSONResponse({"error": "key reused"}, 422)
        return await answer(request, rule, refund)

    async def lookup(self, request: Request) -> Response:
        self.requests.append(("GET", request.url.path, ""))
        account = self._account(request)
        if account is None:
            return JSONResponse({"error": "unauthorized"}, 401)
        mine = [c for c in self.charges.values() if c["account"] == account]
        if "id" in request.path_params:
            found = [c for c in mine if c["id"] == request.path_params["id"]]
            return JSONResponse(found[0]) if found else JSONResponse({"error": "not found"}, 404)
        reference = request.query_params.get("reference")
        return JSONResponse({"charges": [c for c in mine if c["reference"] == reference]})

    async def notify(self, charge: dict[str, Any]) -> None:
        body = orjson.dumps({"id": "evt_" + secrets.token_hex(8), "type": f"charge.{charge['state']}",
                             "charge": charge})
        at = int((await self.now()).timestamp())
        signed = signature(ACCOUNTS[charge["account"]]["webhook_secret"], at, body)
        headers = {"Payzo-Signature": f"t={at},hmac={signed}", "Content-Type": "application/json"}
        async with httpx.AsyncClient(timeout=10) as http:
            for url in self.hooks:
                await http.post(url, content=body, headers=headers)


async def hold(request: Request) -> Response:
    """Answer nothing until the client gives up."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    return Response(status_code=599)


async def answer(request: Request, rule: dict[str, Any], charge: dict[str, Any]) -> Response:
    fault = rule["fault"]
    if fault == "lose_response":
        return await hold(request)
    if fault == "delay":
        await asyncio.sleep(rule["delay_ms"] / 1000)
    if fault == "error_500_after":
        return JSONResponse({"error": "internal"}, 500)
    if fault in ("malformed_body", "empty_body"):
        mangled = b'{"id": "pz_' if fault == "malformed_body" else b""
        return Response(mangled, 200, media_type="application/json")
    return JSONResponse(charge)


@asynccontextmanager
async def serve() -> AsyncIterator[PayzoServer]:
    server = PayzoServer()
    app = Starlette(routes=[Route("/charges", server.create, methods=["POST"]),
                            Route("/charges", server.lookup, methods=["GET"]),
                            Route("/charges/{id}", server.lookup, methods=["GET"]),
                            Route("/charges/{id}/refunds", server.refund, methods=["POST"])])
    async with serve_asgi(app) as url:
        server.url = url
        yield server
        for task in server.tasks:
            task.cancel()
