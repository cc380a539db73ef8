"""The read-only operator commands: ``escalations list|show``, ``attempts show``,
``notifications unmatched`` and ``outbox dead-letters``.

Each prints aligned tables for a person, or with ``--json`` one JSON document for a
script; the data comes from :mod:`paycore_console.inspection`, the functions the console uses.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from paycore_cli.common import CommandError
from paycore_cli.operator_commands import attempt_uuid, with_operator_pool

if TYPE_CHECKING:  # imported when a command runs: `paycore health` and the like stay light
    from paycore_console import inspection


def aligned(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Columns padded to their widest cell, two spaces apart (like ``paycore actions list``)."""
    cells = [list(header), *(list(r) for r in rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]


def when(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if value is not None else "-"


def shown(value: Any) -> str:
    return "-" if value is None else str(value)


def summary(detail: dict[str, Any]) -> str:
    """``key=value`` pairs of an event's or episode's (already identifier-only) detail."""
    return " ".join(f"{k}={json.dumps(v, ensure_ascii=False) if not isinstance(v, str) else v}"
                    for k, v in detail.items() if v is not None)


def print_json(document: Any) -> None:
    from paycore_console import inspection

    print(json.dumps(inspection.jsonable(document), indent=2, ensure_ascii=False))


def print_page(items: Sequence[Any], cursor: str | None, as_json: bool, lines: list[str], empty: str) -> None:
    if as_json:
        print_json({"items": list(items), "next_cursor": cursor})
        return
    print("\n".join(lines) if items else empty)
    if cursor is not None:
        print(f"more: --cursor {cursor}")


def _listing(fetch: Any) -> Any:
    """A page, or exit 2 for a cursor the listing did not make (InvalidCursor) or a limit over the
    library's maximum page (both ValueErrors)."""
    try:
        _, found = with_operator_pool(fetch)
    except ValueError as exc:
        raise CommandError(str(exc), code=2) from None
    return found


# -- escalations ------------------------------------------------------------------------------

def escalation_rows(items: Sequence[inspection.EscalationItem]) -> list[str]:
    return aligned(["ID", "STATUS", "REASON", "ACCOUNT", "RAISED (UTC)", "ATTEMPT", "REMINDERS"],
                   [[str(e.escalation_id), e.status, e.reason, shown(e.provider_account), when(e.raised_at),
                     shown(e.attempt_id), str(e.reminder_count)] for e in items])


def cmd_escalations_list(args: argparse.Namespace) -> int:
    from paycore_console import inspection

    async def fetch(settings: Any, pool: Any) -> Any:
        return await inspection.list_escalations(
            pool, reason=args.reason, provider_account=args.account, acknowledged=args.acknowledged,
            open_only=not args.all, limit=args.limit, cursor=args.cursor)

    items, cursor = _listing(fetch)
    print_page(items, cursor, args.json, escalation_rows(items),
               "no escalation matches" if args.all else "no open escalation matches")
    return 0


def cmd_escalations_show(args: argparse.Namespace) -> int:
    from paycore.operator_actions import table as actions_table
    from paycore_console import inspection

    async def fetch(settings: Any, pool: Any) -> inspection.EscalationDetail | None:
        return await inspection.escalation_detail(pool, args.escalation_id)

    _, found = with_operator_pool(fetch)
    if found is None:
        raise CommandError(f"no escalation {args.escalation_id}", code=1)
    if args.json:
        print_json(found)
        return 0
    e = found.escalation
    print(f"escalation {e.escalation_id}: {e.reason}, {e.status}")
    print("\n".join("  " + line for line in aligned(["FIELD", "VALUE"], [
        ["key", e.escalation_key], ["attempt", shown(e.attempt_id)], ["account", shown(e.provider_account)],
        ["raised", when(e.raised_at)], ["acknowledged", when(e.acknowledged_at)],
        ["resolved", when(e.resolved_at)], ["reminders sent", str(e.reminder_count)],
        ["next reminder", when(e.next_reminder_at)],
        *([k, shown(v)] for k, v in found.detail.items())])[1:]))
    print()
    print("\n".join(actions_table(list(found.actions))) if found.actions else "no operator action on it yet")
    return 0


# -- one attempt ------------------------------------------------------------------------------

def attempt_lines(d: inspection.AttemptDetail) -> list[str]:
    from paycore.operator_actions import table as actions_table

    a, o = d.attempt, d.order
    lease = f"{a.recovery_owner} until {when(a.lease_expires_at)}" if a.recovery_owner else "none"
    lines = [f"attempt {a.attempt_id}: {a.state} (attempt {a.attempt_number} of order {a.order_id})"]
    lines += ["  " + line for line in aligned(["FIELD", "VALUE"], [
        ["amount", f"{a.amount_minor} {a.currency} (minor units)"],
        ["account", a.provider_account],
        ["idempotency key", a.idempotency_key],
        ["reference", a.client_reference],
        ["provider payment", shown(a.provider_payment_id)],
        ["provider status", shown(a.provider_status)],
        ["outcome reason", shown(a.outcome_reason)],
        ["version", str(a.version)],
        ["created", when(a.created_at)],
        ["first sent", when(a.first_sent_at)],
        ["escalation deadline", when(a.escalation_deadline)],
        ["next check", when(a.next_check_at)],
        ["lease", lease],
        ["request fields", ", ".join(a.request_fields) + " (values not shown)"],
    ])[1:]]
    lines.append(f"order {o.order_id}: {o.status}, {o.amount_minor} {o.currency}, "
                 f"created {when(o.created_at)}"
                 + (f", cancel requested {when(o.cancel_requested_at)}" if o.cancel_requested_at else ""))
    lines += ["", "history (oldest first)"]
    lines += aligned(["WHEN (UTC)", "EVENT", "KIND", "ACTOR", "DETAIL"],
                     [[when(e.occurred_at), str(e.event_id), e.kind, e.actor, summary(e.summary)]
                      for e in d.history])
    lines += ["", "notifications"]
    lines += aligned(["EVENT", "RECEIVED (UTC)", "TYPE", "STATUS", "PROVIDER PAYMENT"],
                     [[str(n.event_id), when(n.received_at), shown(n.type), shown(n.status),
                       shown(n.provider_payment_id)] for n in d.notifications]
                     ) if d.notifications else ["none"]
    lines += ["", "outbox"]
    lines += aligned(["MESSAGE", "KIND", "STATUS", "TRIES", "CREATED (UTC)", "LAST ERROR"],
                     [[str(m.message_id), m.kind, m.status, str(m.delivery_attempts), when(m.created_at),
                       shown(m.last_error)] for m in d.outbox]) if d.outbox else ["none"]
    lines += ["", "escalations"]
    lines += escalation_rows(d.escalations) if d.escalations else ["none"]
    lines += ["", "operator actions"]
    lines += actions_table(list(d.actions)) if d.actions else ["none"]
    return lines


def cmd_attempts_show(args: argparse.Namespace) -> int:
    from paycore_console import inspection

    attempt_id = attempt_uuid(args.attempt_id)

    async def fetch(settings: Any, pool: Any) -> inspection.AttemptDetail | None:
        return await inspection.attempt_detail(pool, attempt_id)

    _, found = with_operator_pool(fetch)
    if found is None:
        raise CommandError(f"no attempt {attempt_id}", code=1)
    if args.json:
        print_json(found)
    else:
        print("\n".join(attempt_lines(found)))
    return 0


# -- unmatched notifications and dead letters ------------------------------------------------

def cmd_notifications_unmatched(args: argparse.Namespace) -> int:
    from paycore_console import inspection

    async def fetch(settings: Any, pool: Any) -> Any:
        return await inspection.unmatched_notifications(pool, limit=args.limit, cursor=args.cursor)

    items, cursor = _listing(fetch)
    lines = aligned(
        ["EVENT", "RECEIVED (UTC)", "ACCOUNT", "TYPE", "STATUS", "PROVIDER PAYMENT", "REFERENCE",
         "ESCALATION"],
        [[str(u.notification.event_id), when(u.notification.received_at), u.notification.provider_account,
          shown(u.notification.type or (u.notification.unparseable and "unparseable")),
          shown(u.notification.status), shown(u.notification.provider_payment_id),
          shown(u.notification.reference), shown(u.escalation_id)] for u in items])
    print_page(items, cursor, args.json, lines, "no unmatched notification")
    return 0


def cmd_outbox_dead_letters(args: argparse.Namespace) -> int:
    from paycore_console import inspection

    async def fetch(settings: Any, pool: Any) -> Any:
        return await inspection.dead_letters(pool, kind=args.kind, limit=args.limit, cursor=args.cursor)

    items, cursor = _listing(fetch)
    header = ["MESSAGE", "KIND", "DEAD-LETTERED (UTC)", "TRIES", "ATTEMPT", "ESCALATION", "LAST ERROR"]
    lines = aligned(header,
                    [[str(d.row.message_id), d.row.kind, when(d.row.dead_lettered_at),
                      str(d.row.delivery_attempts), shown(d.attempt_id), shown(d.escalation_id),
                      shown(d.row.last_error)] for d in items])
    print_page(items, cursor, args.json, lines, "no dead-lettered outbox row")
    return 0
