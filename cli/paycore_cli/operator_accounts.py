"""``paycore operators add|disable|enable|passwd|role|end-sessions|sessions|list``: console accounts.

The password is never an argument (it would sit in the shell history and in
``ps``) and never printed or logged: it is read from standard input when that
is a pipe (its first line), else prompted for twice without echo.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from typing import Any, TextIO

from paycore.operators import Role
from paycore_cli.arguments import operator_handle
from paycore_cli.common import CommandError
from paycore_cli.operator_commands import run_action, with_operator_pool

# The roles, from the one enum (paycore.operators.Role): a role added there is offered here.
ROLES = [role.value for role in Role]
ROLES_HELP = "viewer reads; operator also acts; refunder also sends money back (refunds, approvals)"


def add_operator_account_commands(commands: Any) -> None:
    """The ``operators`` command and its actions, on the top-level subparsers ``commands``."""
    ops = commands.add_parser(
        "operators", help="the console's operator accounts: add, disable, enable, passwd, role, sessions",
        description="Local operator accounts for the console (docs/operators.md). Every change is recorded "
                    "in operator_actions with who made it (--operator). Needs the database: "
                    "PAYCORE_DATABASE_URL, or the local stack's when `make run` is up.")
    op_cmds = ops.add_subparsers(dest="operators_command", required=True, metavar="ACTION")
    add = op_cmds.add_parser(
        "add", help="add an account; the password comes from stdin or a prompt",
        description="Add an operator account. The password (at least 12 characters, not the name) is "
                    "read from standard input when it is piped (the first line), else prompted for "
                    "twice; it is never an argument.")
    add.add_argument("name", metavar="NAME", help="the operator handle the account signs in and acts as")
    add.add_argument("--role", required=True, choices=ROLES, help=ROLES_HELP)
    _who(add, "adding it", reason_required=False)
    disable = op_cmds.add_parser(
        "disable", help="disable an account: no more sign-ins, its sessions end",
        description="Disable an operator account. It cannot sign in again and its console sessions end at "
                    "once. Accounts are never deleted: the record names them. `enable` undoes it.")
    disable.add_argument("name", metavar="NAME")
    _who(disable, "disabling it", reason_required=True)
    enable = op_cmds.add_parser(
        "enable", help="enable a disabled account again",
        description="Enable a disabled operator account: it signs in again with its password (give it a "
                    "new one with `passwd` if the old one may be known).")
    enable.add_argument("name", metavar="NAME")
    _who(enable, "enabling it", reason_required=True)
    passwd = op_cmds.add_parser(
        "passwd", help="give an account a new password; its sessions end",
        description="Set a new password for an operator account and end all its console sessions (a "
                    "leaked password ends here; the name stays). The password is read from standard "
                    "input when it is piped (the first line), else prompted for twice; never an argument.")
    passwd.add_argument("name", metavar="NAME")
    _who(passwd, "changing it", reason_required=False)
    role = op_cmds.add_parser(
        "role", help="change an account's role; its sessions end",
        description=f"Change an operator account's role ({ROLES_HELP}). Its console "
                    "sessions end: they carry the old role.")
    role.add_argument("name", metavar="NAME")
    role.add_argument("role", choices=ROLES, metavar="ROLE", help=" | ".join(ROLES))
    _who(role, "changing it", reason_required=True)
    end = op_cmds.add_parser(
        "end-sessions", help="end every console session of an account (an admin's action)",
        description="End every open console session of an operator account at once (a stolen laptop, a "
                    "copied cookie). The account can sign in again.")
    end.add_argument("name", metavar="NAME")
    _who(end, "ending them", reason_required=False)
    sessions = op_cmds.add_parser("sessions", help="an account's open console sessions")
    sessions.add_argument("name", metavar="NAME")
    sessions.add_argument("--json", action="store_true", help="print JSON for machines")
    sessions.set_defaults(handler=cmd_operators)
    listing = op_cmds.add_parser("list", help="every account, its role, and whether it is disabled")
    listing.add_argument("--json", action="store_true", help="print JSON for machines")
    listing.set_defaults(handler=cmd_operators)


def _who(parser: Any, doing: str, *, reason_required: bool) -> None:
    parser.add_argument("--operator", required=True, type=operator_handle, metavar="WHO",
                        help=f"who is {doing} (recorded in operator_actions)")
    parser.add_argument("--reason", required=reason_required, default=None, metavar="TEXT",
                        help="why (recorded)" if reason_required else "why (recorded; optional)")
    parser.add_argument("--json", action="store_true", help="print the recorded action as JSON")
    parser.set_defaults(handler=cmd_operators)


def read_password(stdin: TextIO | None = None) -> str:
    """The new password: stdin's first line when piped, else typed twice at a prompt."""
    stream = sys.stdin if stdin is None else stdin
    if not stream.isatty():
        password = stream.readline().removesuffix("\n").removesuffix("\r")
        if not password:
            raise CommandError("no password on standard input", code=2)
        return password
    first = getpass.getpass("New password: ")
    if getpass.getpass("Again: ") != first:
        raise CommandError("the passwords do not match", code=2)
    return first


def cmd_operators(args: argparse.Namespace) -> int:
    from paycore import operators
    from paycore.clock import SystemClock

    command = args.operators_command
    if command == "list":
        async def listed(settings: Any, pool: Any) -> list[operators.Operator]:
            return await operators.list_operators(pool)

        _, found = with_operator_pool(listed)
        if args.json:
            print(json.dumps([o.as_json() for o in found], indent=2, ensure_ascii=False))
        elif not found:
            print("no operator accounts")
        else:
            print("\n".join(_table(found)))
        return 0
    if command == "sessions":
        return _print_sessions(args)

    password = read_password() if command in ("add", "passwd") else ""

    async def act(settings: Any, pool: Any) -> operators.AccountChanged:
        now, who, why = SystemClock().now(), args.operator, args.reason
        if command == "add":
            return await operators.add_operator(pool, args.name, password, args.role, now, operator=who,
                                                reason=why)
        if command == "disable":
            return await operators.disable_operator(pool, args.name, now, operator=who, reason=why)
        if command == "enable":
            return await operators.enable_operator(pool, args.name, now, operator=who, reason=why)
        if command == "passwd":
            return await operators.set_password(pool, args.name, password, now, operator=who, reason=why)
        if command == "role":
            return await operators.set_role(pool, args.name, args.role, now, operator=who, reason=why)
        return await operators.end_sessions(pool, args.name, now, operator=who, reason=why)

    change = run_action(act, operators.OperatorAccountRefused, operators.OperatorNotFound)
    if args.json:  # the recorded action alone, as every operator action's --json prints
        print(json.dumps(change.recorded.as_json(), indent=2, ensure_ascii=False))
        return 0
    account = change.operator
    done = {"add": "added", "disable": "disabled", "enable": "enabled", "passwd": "given a new password",
            "role": f"made a {account.role.value}", "end-sessions": "signed out everywhere"}[command]
    ended = f"; {change.sessions_ended} console session(s) ended" if command != "add" else ""
    print(f"operator {account.name} ({account.role.value}) {done} by {args.operator}{ended}")
    return 0


def _print_sessions(args: argparse.Namespace) -> int:
    from paycore import operator_sessions, operators
    from paycore.clock import SystemClock
    from paycore_console.credentials import SESSION_IDLE

    async def listed(settings: Any, pool: Any) -> list[operator_sessions.StoredSession]:
        await operators.get_operator(pool, args.name)  # raises OperatorNotFound
        return await operator_sessions.open_sessions(pool, args.name.strip(), SystemClock().now(),
                                                     SESSION_IDLE.read(os.environ))

    found = run_action(listed, operators.OperatorNotFound)
    if args.json:
        print(json.dumps([{"session": s.handle, "signed_in": s.created_at.isoformat(),
                           "last_used": s.last_seen_at.isoformat(), "expires": s.expires_at.isoformat()}
                          for s in found], indent=2))
    elif not found:
        print(f"operator {args.name.strip()} has no open console sessions")
    else:
        stamp = "%Y-%m-%d %H:%M:%S"
        rows = [[s.handle, *(t.strftime(stamp) for t in (s.created_at, s.last_seen_at, s.expires_at))]
                for s in found]
        header = ["SESSION", "SIGNED IN (UTC)", "LAST USED (UTC)", "EXPIRES (UTC)"]
        print("\n".join(_columns([header, *rows])))
    return 0


def _table(found: list[Any]) -> list[str]:
    rows = [["NAME", "ROLE", "CREATED (UTC)", "DISABLED (UTC)"]]
    for o in found:
        rows.append([o.name, o.role.value, o.created_at.strftime("%Y-%m-%d %H:%M:%S"),
                     o.disabled_at.strftime("%Y-%m-%d %H:%M:%S") if o.disabled_at else "-"])
    return _columns(rows)


def _columns(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
