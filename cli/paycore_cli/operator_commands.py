"""The operator commands: ``escalations``, ``outbox``, ``notifications``, ``accounts`` and ``actions``.

Each runs on a small pool over PAYCORE_DATABASE_URL and prints what it recorded.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from uuid import UUID

from paycore.config import DATABASE_URL, load_settings
from paycore_cli.common import CommandError, database_url, redact_dsn

T = TypeVar("T")
CONNECT_TIMEOUT_S = 10.0


def with_operator_pool(action: Callable[[Any, Any], Awaitable[T]]) -> tuple[Any, T]:
    """Run an operator ``action(settings, pool)`` on a small pool over the command's database
    (PAYCORE_DATABASE_URL, or the local stack's: :func:`paycore_cli.common.database_url`)."""
    import asyncpg

    from paycore.db import create_pool

    dsn = database_url()
    settings = dataclasses.replace(load_settings(require_account=False), database_url=dsn)

    async def run() -> T:
        try:
            pool = await asyncio.wait_for(create_pool(dsn, max_size=2), timeout=CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            hint = "" if DATABASE_URL.get(os.environ) else " (the local stack's: is `make run` up?)"
            raise CommandError(f"cannot connect to the database {redact_dsn(dsn)}{hint}: "
                               f"{str(exc).strip() or type(exc).__name__}") from None
        try:
            return await action(settings, pool)
        finally:
            await pool.close()

    return settings, asyncio.run(run())


def run_action(action: Callable[[Any, Any], Awaitable[T]], *refusals: type[Exception]) -> T:
    """An operator action on :func:`with_operator_pool`: the library refusing it (``refusals``)
    exits 1 with its reason, an invalid operator handle or reason exits 2."""
    from paycore.operator_actions import InvalidOperatorAction

    try:
        return with_operator_pool(action)[1]
    except refusals as exc:
        raise CommandError(str(exc), code=1) from None
    except InvalidOperatorAction as exc:
        raise CommandError(str(exc), code=2) from None


def attempt_uuid(text: str) -> UUID:
    """An attempt id given on the command line, or exit 2 naming what was given."""
    try:
        return UUID(text)
    except ValueError:
        raise CommandError(f"{text!r} is not an attempt id (a UUID)", code=2) from None


def _print_recorded(args: argparse.Namespace, recorded: Any, summary: str) -> None:
    """What an operator action prints: the recorded action and a one-line summary, or with
    ``--json`` the recorded action alone, as one JSON document for scripts."""
    if getattr(args, "json", False):
        print(json.dumps(recorded.as_json(), indent=2, ensure_ascii=False))
        return
    from paycore.operator_actions import describe

    print("\n".join([*describe(recorded), summary]))


def cmd_outbox(args: argparse.Namespace) -> int:
    from datetime import timedelta

    from paycore import outbox_admin
    from paycore.clock import SystemClock
    from paycore_dispatcher.settings import OUTBOX_RETENTION

    async def act(settings: Any, pool: Any) -> tuple[Any, str]:
        now = SystemClock().now()
        if args.outbox_command == "purge":
            older = args.older_than if args.older_than is not None else OUTBOX_RETENTION.read(os.environ)
            r = await outbox_admin.purge_dispatched(pool, now=now, older_than=timedelta(seconds=older))
            return None, f"deleted {r.deleted} dispatched rows; kept {r.archived} dedup keys"
        action = outbox_admin.requeue if args.outbox_command == "requeue" else outbox_admin.skip
        done = await action(pool, args.message_id, operator=args.operator, reason=args.reason, now=now)
        return done.recorded, (f"outbox message {done.message_id}: {done.action} done; resolved escalations "
                               f"{done.resolved_escalations or 'none'}")

    recorded, message = run_action(act, outbox_admin.OutboxActionRefused)
    if recorded is None:
        print(message)
    else:
        _print_recorded(args, recorded, message)
    return 0


def cmd_escalations(args: argparse.Namespace) -> int:
    from paycore import escalations
    from paycore.clock import SystemClock
    from paycore.operator_actions import OperatorAction

    async def act(settings: Any, pool: Any) -> OperatorAction:
        now = SystemClock().now()
        if args.escalation_command == "ack":
            return await escalations.acknowledge(pool, args.escalation_id, operator=args.operator,
                                                 reason=args.reason, now=now,
                                                 reminder_interval=settings.reminder_ack_interval)
        return await escalations.resolve(pool, args.escalation_id, operator=args.operator,
                                         reason=args.reason, now=now)

    recorded = run_action(act, escalations.EscalationActionRefused)
    _print_recorded(args, recorded, f"escalation {args.escalation_id}: {args.escalation_command} done")
    return 0


def cmd_notifications_attach(args: argparse.Namespace) -> int:

    from paycore.clock import SystemClock
    from paycore.notifications import Attached, AttachRefused, attach_notification

    attempt_id = attempt_uuid(args.attempt_id)

    async def attach(settings: Any, pool: Any) -> Attached:
        return await attach_notification(pool, event_id=args.event_id, attempt_id=attempt_id,
                                         operator=args.operator, reason=args.reason, now=SystemClock().now(),
                                         reminder_interval=settings.reminder_interval,
                                         recheck_after_s=settings.recheck_after_s)

    done = run_action(attach, AttachRefused, LookupError)
    _print_recorded(args, done.recorded, f"attached notification {args.event_id} to attempt {attempt_id}: "
                                         f"now {done.attempt.state.value}")
    return 0


def cmd_actions(args: argparse.Namespace) -> int:
    import json

    from paycore.operator_actions import OperatorAction, list_actions, table

    attempt_id = None if args.attempt is None else attempt_uuid(args.attempt)

    async def fetch(settings: Any, pool: Any) -> list[OperatorAction]:
        return await list_actions(pool, attempt_id=attempt_id, escalation_id=args.escalation,
                                  operator=args.operator, limit=args.limit)

    _, found = with_operator_pool(fetch)
    if args.json:
        print(json.dumps([a.as_json() for a in found], indent=2, ensure_ascii=False))
    elif not found:
        print("no operator actions match")
    else:
        print("\n".join(table(found)))
    return 0


def cmd_accounts(args: argparse.Namespace) -> int:
    from paycore import accounts
    from paycore.clock import SystemClock
    from paycore.operator_actions import OperatorAction, describe

    if args.accounts_command == "list":
        async def registered(settings: Any, pool: Any) -> list[Any]:
            rows: list[Any] = await accounts.PROVIDER_ACCOUNTS.registered.fetch(pool)
            return rows

        _, rows = with_operator_pool(registered)
        for row in rows:
            print(f"{row['provider_account']}  {row['base_url']}  api {row['api_version']}  "
                  f"key retention {row['key_retention']}  margin {row['escalation_margin']}  "
                  f"lookups {row['lookup_rate_per_s']}/s  updated {row['updated_at'].isoformat()}")
        if not rows:
            print("no provider account is registered yet")
        return 0

    configured = load_settings()  # the configuration to apply: PAYCORE_CARDCO_* and PAYCORE_ACCOUNTS_FILE
    chosen = [a for a in configured.accounts if args.account in (None, a.provider_account)]
    if not chosen:
        raise CommandError(f"{args.account} is not a configured provider account", code=2)

    async def apply(settings: Any, pool: Any) -> list[OperatorAction | None]:
        now = SystemClock().now()
        return [await accounts.apply_configuration(pool, acct, operator=args.operator, reason=args.reason,
                                                   now=now) for acct in chosen]

    done = run_action(apply)
    for acct, recorded in zip(chosen, done, strict=True):
        if recorded is None:
            print(f"{acct.provider_account}: already registered with these settings; nothing recorded")
        else:
            print("\n".join(describe(recorded)))
    return 0


# -- issue 13: the operator actions that change attempts (paycore.dead_ends, paycore.conflicts) --------

def cmd_attempts_close(args: argparse.Namespace) -> int:
    from paycore.clock import SystemClock
    from paycore.dead_ends import Closed, CloseRefused, close_as_not_charged
    from paycore.errors import NotFound

    attempt_id = attempt_uuid(args.attempt_id)

    async def close(settings: Any, pool: Any) -> Closed:
        return await close_as_not_charged(pool, attempt_id=attempt_id, operator=args.operator,
                                          reason=args.reason, checked_at_provider=args.checked,
                                          now=SystemClock().now())

    done = run_action(close, CloseRefused, NotFound)
    _print_recorded(args, done.recorded,
                    f"attempt {attempt_id}: closed as not charged (now {done.attempt.state.value}); resolved "
                    f"escalations {done.resolved_escalations or 'none'}; the order can be paid again")
    return 0


def cmd_escalations_resolve_conflict(args: argparse.Namespace) -> int:
    from paycore.clock import SystemClock
    from paycore.conflicts import ConflictResolutionRefused, ConflictResolved, resolve_conflict
    from paycore.errors import NotFound

    owner = None if args.neither else attempt_uuid(args.owner)

    async def decide(settings: Any, pool: Any) -> ConflictResolved:
        return await resolve_conflict(pool, escalation_id=args.escalation_id, owner_attempt_id=owner,
                                      operator=args.operator, reason=args.reason, now=SystemClock().now(),
                                      reminder_interval=settings.reminder_interval,
                                      recheck_after_s=settings.recheck_after_s)

    done = run_action(decide, ConflictResolutionRefused, NotFound)
    if done.owner is None:
        summary = (f"escalation {args.escalation_id}: resolved; neither attempt owns the payment "
                   "(no attempt changed)")
    else:
        summary = (f"escalation {args.escalation_id}: resolved; attempt {done.owner.attempt_id} owns the "
                   f"payment (now {done.owner.state.value})")
    _print_recorded(args, done.recorded, summary)
    return 0
