"""``paycore refunds|captures|voids`` and ``paycore credentials``: what follows a payment, from a shell.

``create`` records the operation under the payment's lock and sends it once, with
:class:`paycore.operation_sends.OperationSender` and the provider-account settings of the
environment (``PAYCORE_CARDCO_*``, ``PAYCORE_ACCOUNTS_FILE``), as checkout does; it is requested
by ``cli:<OS user>``. Exit 0: Succeeded, or still live (Started, Unknown: evidence settles it;
``show`` says when); 1: refused (nothing recorded), ended Failed or NotApplied (nothing moved),
or no such order or operation; 2: bad arguments or configuration.

``credentials`` issues, lists and revokes the back office's service credentials
(:mod:`paycore.service_credentials`; docs/decisions/0009-back-office-credentials.md). A
secret is printed once, by ``issue``, and never again.
"""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import json
import os
from typing import TYPE_CHECKING, Any
from uuid import UUID

from paycore_cli.common import CommandError
from paycore_cli.inspect_commands import aligned, shown, when
from paycore_cli.operator_commands import run_action, with_operator_pool

if TYPE_CHECKING:  # imported when a command runs: `paycore --help` stays light
    from paycore.domain import OperationKind
    from paycore.operation_views import OperationView

MAX_REASON_CHARS = 200  # what every provider's refund reason takes
# The commands, the operation kind each names (by its value) and what ``create`` takes.
GROUPS = {"refunds": ("refund", "a refund of a paid order's payment: part or all of what was captured"),
          "captures": ("capture", "a capture of a held payment (an order created with capture: manual)"),
          "voids": ("cancel", "a void of a held payment: the whole hold released, nothing charged")}
NOUN = {"refund": "refund", "capture": "capture", "cancel": "void"}
SCOPES = ("refunds", "captures", "voids", "read")


def os_user() -> str:
    """Who runs the command, as the operating system names them."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry and no LOGNAME/USER: a bare container
        return f"uid-{os.getuid()}"


def reason_text(raw: str) -> str:
    if not raw.strip() or len(raw) > MAX_REASON_CHARS or not raw.isprintable():
        raise argparse.ArgumentTypeError(f"printable text of 1 to {MAX_REASON_CHARS} characters")
    return raw


def positive_amount(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of minor units: {raw!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of minor units, got {value}")
    return value


def add_operation_commands(commands: Any) -> None:
    """``refunds``, ``captures``, ``voids`` and ``credentials``, on the top-level subparsers."""
    needs = ("Needs the database (PAYCORE_DATABASE_URL, or the local stack's when `make run` is up) and, "
             "to create one, the provider accounts' settings checkout has (PAYCORE_CARDCO_*, "
             "PAYCORE_ACCOUNTS_FILE).")
    for group, (kind, text) in GROUPS.items():
        noun = NOUN[kind]
        parser = commands.add_parser(
            group, help=f"{group} of an order's payment: create, show"
                        + (", list" if group == "refunds" else ""),
            description=f"{text[0].upper()}{text[1:]}, recorded before it is sent, sent once, Unknown when "
                        f"unanswered (docs/operations-after-payment.md). {needs}")
        actions = parser.add_subparsers(dest=f"{group}_command", required=True, metavar="ACTION")
        create = actions.add_parser(
            "create", help=f"ask for a {noun} of the order's payment and send it once",
            description=f"Record a {noun} of ORDER_ID's payment (its Succeeded attempt) under the payment's "
                        "lock and send it once; requested by cli:<your OS user>. Prints the operation. "
                        "Exit 0 when it succeeded or is still in flight (evidence settles it: `show` it "
                        "later), 1 when refused (nothing recorded) or it ended Failed or NotApplied.")
        create.add_argument("order_id", metavar="ORDER_ID")
        if kind != "cancel":
            create.add_argument("--amount", required=True, type=positive_amount, metavar="N",
                                help="minor units of the payment's currency (1500 is 15.00 EUR)")
        if kind == "refund":
            create.add_argument("--reason", type=reason_text, default=None, metavar="TEXT",
                                help="sent to the provider with the refund "
                                     f"(at most {MAX_REASON_CHARS} characters)")
        create.add_argument("--json", action="store_true", help="print the operation as JSON")
        create.set_defaults(handler=cmd_operation_create, operation_kind=kind)
        show = actions.add_parser(
            "show", help=f"one {noun}: its state and timeline",
            description=f"One {noun}: amount, state, provider status and ids, who asked, and its timeline "
                        "(never its stored request or key).")
        show.add_argument("operation_id", metavar="OPERATION_ID")
        show.add_argument("--json", action="store_true", help="print the operation as JSON")
        show.set_defaults(handler=cmd_operation_show, operation_kind=kind)
        if group == "refunds":
            listing = actions.add_parser("list", help="an order's refunds, oldest first")
            listing.add_argument("order_id", metavar="ORDER_ID")
            listing.add_argument("--json", action="store_true", help="print JSON for machines")
            listing.set_defaults(handler=cmd_operation_list, operation_kind=kind)

    creds = commands.add_parser(
        "credentials", help="the back office's service credentials: issue, list, revoke",
        description="Service credentials for the store's back office (POST /orders/{id}/refunds, …; "
                    "docs/api.md, \"Back office\"). paycore keeps only a hash: a secret is printed once, "
                    "by issue. Rotate by issuing a second credential for the same --client, deploying it, "
                    "then revoking the first; revoking takes effect on the next request. Needs the "
                    "database.")
    cred_cmds = creds.add_subparsers(dest="credentials_command", required=True, metavar="ACTION")
    issue = cred_cmds.add_parser(
        "issue", help="issue a credential and print its secret, once",
        description="Issue a credential named NAME (letters, digits, '.', '_', '-'; never reused, revoked "
                    "ones included) with the given scopes, and print its secret once. Operations it asks "
                    "for are requested by backoffice:NAME.")
    issue.add_argument("name", metavar="NAME")
    issue.add_argument("--scope", action="append", required=True, choices=SCOPES, dest="scopes",
                       help="what it may do (repeat for several): refunds, captures, voids, read")
    issue.add_argument("--client", metavar="CLIENT",
                       help="the back office it stands for (default: NAME); a rotation issues the next "
                            "credential for the same client, so a retry under it is the same request")
    issue.add_argument("--json", action="store_true", help="print the credential and its secret as JSON")
    issue.set_defaults(handler=cmd_credentials)
    listing = cred_cmds.add_parser("list", help="every credential: scopes, last use, revoked (no secrets)")
    listing.add_argument("--json", action="store_true", help="print JSON for machines")
    listing.set_defaults(handler=cmd_credentials)
    revoke = cred_cmds.add_parser("revoke", help="revoke a credential: its next request is refused",
                                  description="Revoke the credential NAME or ID names. Final: issue another.")
    revoke.add_argument("credential", metavar="NAME|ID")
    revoke.add_argument("--json", action="store_true", help="print the revoked credential as JSON")
    revoke.set_defaults(handler=cmd_credentials)


# -- refunds, captures, voids ------------------------------------------------------------------


def _kind(args: argparse.Namespace) -> OperationKind:
    from paycore.domain import OperationKind

    return OperationKind(args.operation_kind)


def operation_lines(view: OperationView) -> list[str]:
    from paycore.currencies import format_amount

    op = view.operation
    lines = [f"{NOUN[op.kind.value]} {op.operation_id}: {op.state.value} "
             f"(order {view.order_id}, payment {op.attempt_id})"]
    lines += ["  " + line for line in aligned(["FIELD", "VALUE"], [
        ["amount", f"{format_amount(op.amount_minor, op.currency)} ({op.amount_minor} minor units)"],
        ["requested by", op.requested_by],
        ["account", op.provider_account],
        ["provider status", shown(op.provider_status)],
        ["provider operation", shown(op.provider_operation_id)],
        ["outcome reason", shown(op.outcome_reason)],
        ["created", when(op.created_at)],
    ])[1:]]
    lines += ["", "timeline (oldest first)"]
    lines += aligned(["WHEN (UTC)", "EVENT", "FROM", "TO"],
                     [[when(e.occurred_at), e.kind, shown(e.from_state), shown(e.to_state)]
                      for e in view.timeline])
    return lines


def _print(view: OperationView, as_json: bool) -> None:
    if as_json:
        print(json.dumps(view.as_json(), indent=2, ensure_ascii=False))
    else:
        print("\n".join(operation_lines(view)))


def cmd_operation_create(args: argparse.Namespace) -> int:
    from paycore.accounts import AccountConfigurationDiffers, register_provider_accounts
    from paycore.clock import SystemClock
    from paycore.config import load_settings
    from paycore.errors import InvalidPaymentMethod
    from paycore.operation_sends import AccountNotConfigured, OperationSender
    from paycore.operation_views import NO_PAYMENT, REFUSALS, payment_of_order, view_operation
    from paycore.operations import Refused
    from paycore.orders import OrderNotFound
    from paycore.providers.registry import for_accounts
    from paycore_cli.common import database_url

    kind = _kind(args)
    noun = NOUN[kind.value]
    # The accounts' settings, as checkout has them: the payment's must match the registered row.
    settings = dataclasses.replace(load_settings(), database_url=database_url())

    async def send(_: Any, pool: Any) -> OperationView | Refused:
        clock = SystemClock()
        payment = await payment_of_order(pool, args.order_id)
        if payment is None:
            return Refused(NO_PAYMENT[kind])
        account = settings.account(payment.provider_account)
        if account is None:
            raise AccountNotConfigured(f"the payment's provider account {payment.provider_account} is not "
                                       "configured here (PAYCORE_CARDCO_*, PAYCORE_ACCOUNTS_FILE)")
        await register_provider_accounts(pool, [account], clock.now())  # refuses a different configuration
        client = for_accounts(settings.accounts, clock,
                              max_call_duration_s=settings.budgets.max_call_duration_s)
        try:
            sender = OperationSender(pool=pool, client=client, clock=clock, settings=settings)
            amount = payment.amount_minor if kind.value == "cancel" else args.amount
            done = await sender.request(payment.attempt_id, kind, amount, requested_by=f"cli:{os_user()}",
                                        reason=getattr(args, "reason", None))
        finally:
            await client.aclose()
        if isinstance(done, Refused):
            return done
        return await view_operation(pool, done.operation_id)

    try:
        result = run_action(send, OrderNotFound, AccountNotConfigured, AccountConfigurationDiffers)
    except InvalidPaymentMethod as exc:  # the provider's contract refused a value; nothing recorded
        raise CommandError(str(exc), code=2) from None
    if isinstance(result, Refused):
        title, detail = REFUSALS[result.reason]
        raise CommandError(f"{noun} refused ({result.reason.value}): {title}. {detail} Nothing was recorded.")
    _print(result, args.json)
    op = result.operation
    if op.state.value in ("Failed", "NotApplied"):
        raise CommandError(f"{noun} {op.operation_id} ended {op.state.value}: nothing moved"
                           + (f" ({op.outcome_reason})" if op.outcome_reason else ""))
    if not op.is_final and not args.json:
        print(f"\nin flight: evidence (a webhook, recovery's lookup) will settle it; "
              f"`paycore {_group(kind)} show {op.operation_id}` says when")
    return 0


def _group(kind: OperationKind) -> str:
    return next(group for group, (value, _) in GROUPS.items() if value == kind.value)


def cmd_operation_show(args: argparse.Namespace) -> int:
    from paycore.operation_views import view_operation
    from paycore.operations import OperationNotFound

    kind = _kind(args)
    try:
        operation_id = UUID(args.operation_id)
    except ValueError:
        raise CommandError(f"{args.operation_id!r} is not an operation id (a UUID)", code=2) from None

    async def fetch(_: Any, pool: Any) -> OperationView:
        return await view_operation(pool, operation_id, kind)

    try:
        view = run_action(fetch)
    except OperationNotFound:
        raise CommandError(f"no {NOUN[kind.value]} {operation_id}") from None
    _print(view, args.json)
    return 0


def cmd_operation_list(args: argparse.Namespace) -> int:
    from paycore.currencies import format_amount
    from paycore.operation_views import payment_of_order, views_of_payment
    from paycore.orders import OrderNotFound

    kind = _kind(args)

    async def fetch(_: Any, pool: Any) -> list[OperationView]:
        payment = await payment_of_order(pool, args.order_id)
        return [] if payment is None else await views_of_payment(pool, payment, kind)

    try:
        views = run_action(fetch)
    except OrderNotFound:
        raise CommandError(f"no order {args.order_id}") from None
    if args.json:
        print(json.dumps({"order_id": args.order_id, "items": [v.as_json() for v in views]}, indent=2,
                         ensure_ascii=False))
    elif not views:
        print(f"order {args.order_id} has no {_group(kind)}")
    else:
        print("\n".join(aligned(
            ["ID", "STATE", "AMOUNT", "REQUESTED BY", "CREATED (UTC)", "OUTCOME REASON"],
            [[str(v.operation.operation_id), v.operation.state.value,
              format_amount(v.operation.amount_minor, v.operation.currency), v.operation.requested_by,
              when(v.operation.created_at), shown(v.operation.outcome_reason)] for v in views])))
    return 0


# -- credentials -----------------------------------------------------------------------------------


def cmd_credentials(args: argparse.Namespace) -> int:
    from paycore import service_credentials as sc
    from paycore.clock import SystemClock

    command = args.credentials_command
    if command == "list":
        async def listed(_: Any, pool: Any) -> list[sc.Credential]:
            return await sc.list_credentials(pool)

        _, found = with_operator_pool(listed)
        if args.json:
            print(json.dumps([c.as_json() for c in found], indent=2, ensure_ascii=False))
        elif not found:
            print("no service credentials")
        else:
            print("\n".join(aligned(
                ["ID", "NAME", "SCOPES", "ISSUED (UTC)", "ISSUED BY", "LAST USED (UTC)", "REVOKED (UTC)"],
                [[str(c.credential_id), c.name, ",".join(sorted(c.scopes)), when(c.issued_at), c.issued_by,
                  when(c.last_used_at), when(c.revoked_at)] for c in found])))
        return 0

    if command == "issue":
        async def issued(_: Any, pool: Any) -> sc.Issued:
            return await sc.issue(pool, args.name, args.scopes, issued_by=os_user(), now=SystemClock().now(),
                                  client=args.client)

        done = _credential_action(issued)
        c = done.credential
        if args.json:
            print(json.dumps({**c.as_json(), "secret": done.secret}, indent=2, ensure_ascii=False))
            return 0
        print(f"credential {c.name} ({c.credential_id}) issued with scopes {', '.join(sorted(c.scopes))}; "
              f"its operations are requested by {c.requester}")
        print("its secret, shown this once (paycore keeps only a hash): give it to the back office as "
              "Authorization: Bearer <secret>")
        print(done.secret)
        return 0

    async def revoked(_: Any, pool: Any) -> sc.Credential:
        return await sc.revoke(pool, args.credential, revoked_by=os_user(), now=SystemClock().now())

    c = _credential_action(revoked)
    if args.json:
        print(json.dumps(c.as_json(), indent=2, ensure_ascii=False))
    else:
        print(f"credential {c.name} ({c.credential_id}) revoked by {c.revoked_by}: "
              "its next request is refused")
    return 0


def _credential_action(action: Any) -> Any:
    """An invalid name or scope exits 2 (the arguments); a name taken, a credential unknown or
    already revoked, 1."""
    from paycore import service_credentials as sc

    try:
        return run_action(action, sc.CredentialNotFound)
    except sc.InvalidCredential as exc:
        raise CommandError(str(exc), code=2) from None
    except sc.CredentialRefused as exc:
        raise CommandError(str(exc), code=1) from None
