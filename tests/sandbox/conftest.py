from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.applications import Starlette

from harness.servers import serve_asgi
from paycore_sandbox.app import create_app
from paycore_sandbox.settings import SandboxSettings


@pytest.fixture
def sandbox_app() -> Starlette:
    return create_app(SandboxSettings.default())


@pytest.fixture
async def sandbox_url(sandbox_app: Starlette) -> AsyncIterator[str]:
    async with serve_asgi(sandbox_app) as url:
        yield url


@pytest.fixture
async def client(sandbox_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=sandbox_url, timeout=10) as c:
        yield c


@pytest.fixture
async def impatient(sandbox_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """A client that gives up quickly, for the "no response" faults."""
    async with httpx.AsyncClient(base_url=sandbox_url, timeout=0.3) as c:
        yield c
