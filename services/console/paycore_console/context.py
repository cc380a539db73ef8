"""What every route needs, set on ``app.state.console`` when the app starts."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import asyncpg
import jinja2
from starlette.requests import Request

from paycore.clock import Clock
from paycore.http.outage import DatabaseOutage
from paycore.operation_sends import OperationSender
from paycore_console.credentials import ConsoleAuth
from paycore_console.settings import ConsoleSettings

T = TypeVar("T")


@dataclass
class Console:
    settings: ConsoleSettings
    clock: Clock
    pool: asyncpg.Pool
    auth: ConsoleAuth
    templates: jinja2.Environment
    outage: DatabaseOutage
    # Sends refunds for the provider accounts configured here; None: none is (refunds are refused).
    sender: OperationSender | None = None
    _sending: set[asyncio.Task[Any]] = field(default_factory=set)

    @property
    def secure_cookies(self) -> bool:
        return not self.settings.insecure_cookies

    async def finish(self, work: Coroutine[Any, Any, T]) -> T:
        """Run ``work`` to its end even if the request that started it goes away (a closed tab, a
        dropped connection): a refund sent is recorded whatever the browser does."""
        task: asyncio.Task[T] = asyncio.get_running_loop().create_task(work)
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)
        return await asyncio.shield(task)

    async def drain(self, timeout_s: float) -> None:
        """On shutdown, let refunds in flight record their outcome (bounded)."""
        if self._sending:
            await asyncio.wait(self._sending, timeout=timeout_s)


def console_of(request: Request) -> Console:
    console: Console = request.app.state.console
    return console
