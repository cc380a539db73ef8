"""What every route needs, set on ``app.state.console`` when the app starts."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg
import jinja2
from starlette.requests import Request

from paycore.clock import Clock
from paycore.http.outage import DatabaseOutage
from paycore_console.credentials import ConsoleAuth
from paycore_console.settings import ConsoleSettings


@dataclass
class Console:
    settings: ConsoleSettings
    clock: Clock
    pool: asyncpg.Pool
    auth: ConsoleAuth
    templates: jinja2.Environment
    outage: DatabaseOutage

    @property
    def secure_cookies(self) -> bool:
        return not self.settings.insecure_cookies


def console_of(request: Request) -> Console:
    console: Console = request.app.state.console
    return console
