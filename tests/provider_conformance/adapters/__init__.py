"""Each provider's conformance adapter: ``adapters/<name>.py`` exporting ``ADAPTER``.

An adapter is what the suite cannot learn from the provider's package: how to serve the
provider's wire on a free port (the sandbox's dialect, or the provider's own test server), the
storefront's payment methods for a success and a decline, and what its webhook signature can
tell. The suite finds it by the package's name, so a new package needs its adapter file and
no edit of the suite.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from paycore.providers.base import PaymentMethod
from paycore.providers.package import ProviderAccountConfig

# Every request fault a provider's test server makes on demand (the sandbox's names):
# at arrival, nothing runs (drop_request); at execution, a 500 once it ran (error_500_after); on
# the way back, the answer lost (lose_response), late (delay), mangled (malformed_body, empty_body).
FAULTS = ("drop_request", "lose_response", "error_500_after", "malformed_body", "empty_body", "delay")


class ProviderServer(Protocol):
    """The provider's wire, served on a free port, with the controls a test needs."""

    url: str
    # How long (server-clock seconds) a new payment may stay unfindable by reference (a search
    # index's lag); 0 where a lookup sees it at once.
    index_lag_s: float

    def account(self, label: str) -> ProviderAccountConfig:
        """The test-mode account ``label`` (``acct_store``, ``acct_other``), configured against
        this server as a store would configure it."""

    async def fault(self, fault: str, *, operation: str = "create", delay_ms: int | None = None) -> None:
        """Make the next request of ``operation`` meet ``fault`` (one of :data:`FAULTS`), once."""

    async def payments(self) -> list[dict[str, Any]]:
        """Every payment the provider holds: ``id``, ``reference``, ``status``, ``provider_account``."""

    async def received(self, method: str, path: str = "") -> list[str]:
        """The bodies of the ``method`` requests whose path starts with ``path`` that arrived, in order."""

    async def subscribe(self, url: str) -> None:
        """Have the provider deliver its webhooks to ``url``."""

    async def now(self) -> datetime:
        """The provider's clock (what its webhook signatures carry)."""

    async def advance(self, seconds: float) -> None:
        """Move the provider's clock."""


@dataclass(frozen=True)
class ConformanceAdapter:
    """What the suite needs of one provider beyond its package."""

    serve: Callable[[], AbstractAsyncContextManager[ProviderServer]]
    methods: Mapping[str, PaymentMethod]  # "succeeded", "declined": the storefront's payment method
    # The account as configured with a well-formed webhook secret that is not the one its
    # provider signs with.
    wrong_secret: Callable[[ProviderAccountConfig], ProviderAccountConfig]
    # Why a stale delivery cannot be told from a fresh one (the signature carries no time);
    # None: the signature carries its time, and a stale one is refused.
    untimed_signature: str | None = None


def adapter_for(name: str) -> ConformanceAdapter:
    """The conformance adapter of the provider ``name`` (``adapters/<name>.py``)."""
    adapter: ConformanceAdapter = importlib.import_module(f"{__name__}.{name}").ADAPTER
    return adapter
