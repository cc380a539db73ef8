"""``paycore reconcile settlements``: the providers' settlement batches against the books.

From each configured account's API (every account, or ``--account``; the batches dated
``--from`` to ``--to``, by default the last 7 days), or from one report file a person
downloaded (``--file``, with exactly one ``--account``). What it does is
:func:`paycore.settlements.reconcile_account` / :func:`~paycore.settlements.reconcile_batch`,
as recovery's daily run does (docs/settlement.md). Exit 0: every batch was read; 1: a batch or
the provider's list could not be read (nothing of it recorded: run it again); 2: bad arguments
or configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import sys
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from paycore_cli.common import CommandError, database_url

if TYPE_CHECKING:
    from paycore.config import ProviderAccountConfig, Settings
    from paycore.settlements import AccountRun

log = logging.getLogger("paycore.cli.settlements")

DEFAULT_DAYS = 7


def iso_date(raw: str) -> date:
    try:
        return date.fromisoformat(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date as YYYY-MM-DD: {raw!r}") from None


def add_settlement_commands(commands: Any) -> None:
    """``reconcile settlements``, on the top-level subparsers."""
    reconcile = commands.add_parser(
        "reconcile", help="check the providers' settlement reports against the books",
        description="Reconcile what the providers paid out against paycore's payments and refunds "
                    "(docs/settlement.md). Needs the database (PAYCORE_DATABASE_URL, or the local stack's) "
                    "and the provider accounts' settings (PAYCORE_CARDCO_*, PAYCORE_STRIPE_*, "
                    "PAYCORE_ADYEN_* with its report user, PAYCORE_ACCOUNTS_FILE).")
    what = reconcile.add_subparsers(dest="reconcile_command", required=True, metavar="WHAT")
    settlements = what.add_parser(
        "settlements", help="settlement batches: from each account's API, or one report file",
        description="Read each account's settlement batches dated --from to --to (default: the last "
                    f"{DEFAULT_DAYS} days) from its provider, or the report --file, and reconcile them: "
                    "each line matched to a payment or refund, each exception escalated once, then the "
                    "payments no closed batch names. Idempotent: a closed batch already recorded is "
                    "not read again.")
    settlements.add_argument("--account", action="append", default=None, metavar="PROVIDER_ACCOUNT",
                             help="a configured account, e.g. cardco:acct_store:live (repeatable; "
                                  "default: every configured account)")
    settlements.add_argument("--from", dest="date_from", type=iso_date, default=None, metavar="YYYY-MM-DD",
                             help=f"the first batch date (default: {DEFAULT_DAYS} days before today, UTC)")
    settlements.add_argument("--to", dest="date_to", type=iso_date, default=None, metavar="YYYY-MM-DD",
                             help="the last batch date, inclusive (default: yesterday, UTC)")
    settlements.add_argument("--file", type=Path, default=None, metavar="PATH",
                             help="a report downloaded from the provider (Cardco lines CSV, Stripe itemized "
                                  "payout reconciliation CSV, Adyen Settlement details CSV), as one closed "
                                  "batch of the one --account")
    settlements.add_argument("--batch-id", default=None,
                             help="with --file: the batch's id (default: from the file, else its digest)")
    settlements.add_argument("--date", dest="batch_date", type=iso_date, default=None, metavar="YYYY-MM-DD",
                             help="with --file: the batch's date (default: from its first line)")
    settlements.add_argument("--json", action="store_true", help="print one JSON document for scripts")
    settlements.set_defaults(handler=cmd_reconcile_settlements)


def _accounts(settings: Settings, wanted: list[str] | None) -> list[ProviderAccountConfig]:
    if not wanted:
        return list(settings.accounts)
    chosen = []
    for name in wanted:
        account = settings.account(name)
        if account is None:
            configured = ", ".join(a.provider_account for a in settings.accounts) or "none"
            raise CommandError(f"{name} is not a configured account (configured: {configured})", code=2)
        chosen.append(account)
    return chosen


def cmd_reconcile_settlements(args: argparse.Namespace) -> int:
    from paycore.config import load_settings

    settings = dataclasses.replace(load_settings(), database_url=database_url())
    accounts = _accounts(settings, args.account)
    if args.file is not None:
        if len(accounts) != 1 or not args.account:
            raise CommandError("--file needs exactly one --account: the account the report is of", code=2)
        if not args.file.is_file():
            raise CommandError(f"{args.file}: no such file", code=2)
    elif args.batch_id is not None or args.batch_date is not None:
        raise CommandError("--batch-id and --date go with --file", code=2)
    today = datetime.now(UTC).date()
    date_from = args.date_from or today - timedelta(days=DEFAULT_DAYS)
    date_to = args.date_to or today - timedelta(days=1)
    if date_to < date_from:
        raise CommandError(f"--to {date_to} is before --from {date_from}", code=2)
    runs, failures = asyncio.run(_reconcile(settings, accounts, args, date_from, date_to))
    _print(runs, failures, args.json)
    return 1 if failures or any(run.unreadable for run in runs) else 0


async def _reconcile(settings: Settings, accounts: list[ProviderAccountConfig], args: argparse.Namespace,
                     date_from: date, date_to: date) -> tuple[list[AccountRun], list[tuple[str, str]]]:
    import asyncpg

    from paycore.accounts import register_provider_accounts
    from paycore.clock import SystemClock
    from paycore.db import create_pool
    from paycore.providers.settlement_sources import read_report_file, settlement_source
    from paycore.settlement_lines import SettlementSourceError
    from paycore.settlements import AccountRun, reconcile_account, reconcile_batch, record_missing

    assert settings.database_url is not None
    clock = SystemClock()
    try:
        pool = await create_pool(settings.database_url, max_size=2)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        why = str(exc).strip() or type(exc).__name__
        raise CommandError(f"cannot connect to the database: {why}") from None
    runs: list[AccountRun] = []
    failures: list[tuple[str, str]] = []
    timing = {"grace": settings.settlement_grace, "reminder_interval": settings.reminder_interval}
    try:
        await register_provider_accounts(pool, accounts, clock.now())  # refuses a different configuration
        for account in accounts:
            name = account.provider_account
            try:
                if args.file is not None:
                    batch, lines = await read_report_file(account.provider, args.file, name,
                                                          batch_id=args.batch_id, batch_date=args.batch_date)
                    outcome = await reconcile_batch(pool, batch, lines, now=clock.now(), progress=_progress,
                                                    reminder_interval=settings.reminder_interval)
                    missing = await record_missing(pool, name, now=clock.now(), **timing)
                    runs.append(AccountRun(name, (outcome,), (), missing))
                else:
                    source = settlement_source(account, clock=clock)
                    try:
                        runs.append(await reconcile_account(pool, source, name, date_from, date_to,
                                                            now=clock.now(), progress=_progress, **timing))
                    finally:
                        closing = getattr(source, "aclose", None)
                        if closing is not None:
                            await closing()
            except SettlementSourceError as exc:
                failures.append((name, str(exc)))
    finally:
        await pool.close()
    return runs, failures


def _progress(batch: Any, lines_read: int) -> None:
    print(f"  {batch.provider_account} {batch.provider_batch_id}: {lines_read:,} lines read", file=sys.stderr)


def _print(runs: list[AccountRun], failures: list[tuple[str, str]], as_json: bool) -> None:
    if as_json:
        print(json.dumps({"accounts": [run.as_json() for run in runs],
                          "failures": [{"provider_account": a, "error": e} for a, e in failures]}, indent=2))
        return
    for run in runs:
        print(f"{run.provider_account}: {len(run.outcomes)} batches, {run.new_missing} newly missing")
        for o in run.outcomes:
            print(f"  {o.provider_batch_id:<28} {o.result:<10} {o.line_count:>9,} lines "
                  f"{o.matched_count:>9,} matched {o.exception_count:>6,} exceptions "
                  f"({o.new_exceptions} new) {o.bad_line_count:>4} unreadable")
        for batch_id, error in run.unreadable:
            print(f"  {batch_id:<28} not read: {error}")
    for account, error in failures:
        print(f"{account}: not read: {error}")
