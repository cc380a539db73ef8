"""Which provider reads an account's settlements: the one place that names the three readers.

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
from paycore.config import ProviderAccountConfig
from paycore.providers.adyen import settlements as adyen
from paycore.providers.cardco import settlements as cardco
from paycore.providers.registry import UnknownProvider
from paycore.providers.stripe import settlements as stripe
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
    if config.provider == "cardco":
        return cardco.CardcoSettlements(config, transport=transport)
    if config.provider == "stripe":
        return stripe.StripeSettlements(config, clock or SystemClock(), transport=transport)
    if config.provider == "adyen":
        return adyen.AdyenSettlements(config, transport=transport)
    raise UnknownProvider(f"no settlement reader for provider {config.provider}")


async def read_report_file(provider: str, path: Path, provider_account: str, *, batch_id: str | None = None,
                           batch_date: date | None = None
                           ) -> tuple[SettlementBatch, AsyncIterator[SettlementLine | BadLine]]:
    """A report file of ``provider`` (Cardco's lines CSV, Stripe's itemized payout reconciliation
    report, Adyen's Settlement details report) as one closed batch of ``provider_account``; may read
    the file twice (a first pass for the batch's id, date and currency)."""
    readers = {"cardco": cardco.read_report_file, "stripe": stripe.read_report_file,
               "adyen": adyen.read_report_file}
    reader = readers.get(provider)
    if reader is None:
        raise UnknownProvider(f"no settlement reader for provider {provider}")
    return await reader(path, provider_account, batch_id=batch_id, batch_date=batch_date)
