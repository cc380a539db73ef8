"""The suite runs once per provider package the registry knows (``registry.PACKAGES``).

Each provider's wire is served on a free port by its conformance adapter
(``adapters/<name>.py``); its client is the package's own ``client`` over two test accounts
of that server (``acct_store``, ``acct_other``), budgets on a :class:`FakeClock`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from paycore.providers.package import ProviderPackage
from paycore.providers.registry import PACKAGES, register
from tests.fourth_provider import provider as payzo
from tests.provider_conformance.support import Conformance, running_conformance

register(payzo.PROVIDER)  # a fourth provider, a test fixture: its one line (shipped code names it nowhere)


@pytest.fixture(params=tuple(PACKAGES))
def provider_package(request: pytest.FixtureRequest) -> ProviderPackage:
    """Each package, for a line that needs no server."""
    return PACKAGES[request.param]


@pytest.fixture(params=tuple(PACKAGES))
async def provider(request: pytest.FixtureRequest) -> AsyncIterator[Conformance]:
    async with running_conformance(PACKAGES[request.param]) as conformance:
        yield conformance
