"""The `paycore` command run in-process against a test stack, as a shell beside it would run it."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import pytest

from paycore_cli.main import main
from tests.support.stack import JWT_SECRET, Stack


def shell_environment(stack: Stack, db_dsn: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    """The stack, and the environment a shell running `paycore` against it would have: nothing
    PAYCORE_* from the caller's, the stack's database, its JWT secret and its sandbox account."""
    for name in list(os.environ):
        if name.startswith("PAYCORE_"):
            monkeypatch.delenv(name)
    for name, value in {"PAYCORE_DATABASE_URL": db_dsn, "PAYCORE_JWT_SECRET": JWT_SECRET,
                        "PAYCORE_CARDCO_BASE_URL": stack.sandbox.url, "PAYCORE_CARDCO_ACCOUNT": "acct_store",
                        "PAYCORE_CARDCO_ENVIRONMENT": "test",
                        "PAYCORE_CARDCO_API_KEY": "sk_test_acct_store_local"}.items():
        monkeypatch.setenv(name, value)
    yield stack


async def paycore(*argv: str) -> int:
    """``main`` in a thread: it runs its own event loop, beside the stack's servers."""
    return await asyncio.to_thread(main, list(argv))
