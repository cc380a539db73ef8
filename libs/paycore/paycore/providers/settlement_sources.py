"""Which provider reads an account's settlements: its package's reader (the registry's).

The reconciliation engine builds a :class:`~paycore.settlement_lines.SettlementSource` per
configured account with :func:`settlement_source`, or reads a report a person downloaded with
:func:`read_report_file`; neither it nor the console names a provider.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import date
from pathlib import Path

import httpx

from paycore.clock import Clock, SystemClock
from paycore.providers.package import ProviderAccountConfig, ProviderPackage
from paycore.providers.registry import PACKAGES, UnknownProvider
from paycore.settlement_lines import BadLine, SettlementBatch, SettlementLine, SettlementSource

__all__ = ["read_report_file", "settlement_source"]


def settlement_source(config: ProviderAccountConfig, *, clock: Clock | None = None,
                      transport: httpx.AsyncBaseTransport | None = None) -> SettlementSource:
    """The source of ``config``'s batches from its provider's API.

    :param clock: Stripe: whose ``now()`` says whether a day's batch is closed (the system's clock
        by default).
    :param transport: Replaces HTTP in tests.
    :raises SettlementSourceError: An Adyen account without a report user (it names the settings).
    :raises UnknownProvider: A provider without a reader.
    """
    return _reader(config.provider).settlement_source(config, clock or SystemClock(), transport=transport)


async def read_report_file(provider: str, path: Path, provider_account: str, *, batch_id: str | None = None,
                           batch_date: date | None = None
                           ) -> tuple[SettlementBatch, AsyncIterator[SettlementLine | BadLine]]:
    """A report file of ``provider`` (Cardco's lines CSV, Stripe's itemized payout reconciliation
    report, Adyen's Settlement details report) as one closed batch of ``provider_account``; may read
    the file twice (a first pass for the batch's id, date and currency)."""
    return await _reader(provider).read_report_file(path, provider_account, batch_id=batch_id,
                                                    batch_date=batch_date)


def _reader(provider: str) -> ProviderPackage:
    package = PACKAGES.get(provider)
    if package is None:
        raise UnknownProvider(f"no settlement reader for provider {provider}")
    return package
