"""``paycore operators add|disable|list``: the console's local operator accounts.

The password is never an argument (it would sit in the shell history and in
``ps``) and never printed or logged: it is read from standard input when that
is a pipe (its first line), else prompted for twice without echo.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from typing import Any, TextIO

from paycore_cli.arguments import operator_handle
from paycore_cli.common import CommandError
from paycore_cli.operator_commands import run_action, with_operator_pool


def add_operator_account_commands(commands: Any) -> None:
    """The ``operators`` command and its actions, on the top-level subparsers ``commands``."""
    ops = commands.add_parser(
        "operators", help="the console's operator accounts: add, disable, list",
        description="Local operator accounts for the console (docs/operators.md). Adding and disabling "
                    "are recorded in operator_actions. Needs PAYCORE_DATABASE_URL.")
    op_cmds = ops.add_subparsers(dest="operators_command", required=True, metavar="ACTION")
    add = op_cmds.add_parser(
        "add", help="add an account; the password comes from stdin or a prompt",
        description="Add an operator account. The password (at least 12 characters, not the name) is "
                    "read from standard input when it is piped (the first line), else prompted for "
                    "twice; it is never an argument.")
    add.add_argument("name", metavar="NAME", help="the operator handle the account signs in and acts as")
    add.add_argument("--role", required=True, choices=["viewer", "operator"],
                     help="viewer reads; operator also acts")
    add.add_argument("--operator", required=True, type=operator_handle, metavar="WHO",
                     help="who is adding it (recorded in operator_actions)")
    add.add_argument("--reason", default=None, metavar="TEXT", help="why (recorded; optional)")
    add.add_argument("--json", action="store_true", help="print the recorded action as JSON")
    add.set_defaults(handler=cmd_operators)
    disable = op_cmds.add_parser(
        "disable", help="disable an account: no more sign-ins, its sessions stop",
        description="Disable an operator account. It cannot sign in again and its console sessions stop "
                    "working at once. Accounts are never deleted: the record names them.")
    disable.add_argument("name", metavar="NAME")
    disable.add_argument("--operator", required=True, type=operator_handle, metavar="WHO",
                         help="who is disabling it (recorded in operator_actions)")
    disable.add_argument("--reason", required=True, metavar="TEXT", help="why (recorded)")
    disable.add_argument("--json", action="store_true", help="print the recorded action as JSON")
    disable.set_defaults(handler=cmd_operators)
    listing = op_cmds.add_parser("list", help="every account, its role, and whether it is disabled")
    listing.add_argument("--json", action="store_true", help="print JSON for machines")
    listing.set_defaults(handler=cmd_operators)


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

    if args.operators_command == "list":
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

    password = read_password() if args.operators_command == "add" else ""

    async def act(settings: Any, pool: Any) -> operators.AccountChanged:
        now = SystemClock().now()
        if args.operators_command == "add":
            return await operators.add_operator(pool, args.name, password, args.role, now,
                                                operator=args.operator, reason=args.reason)
        return await operators.disable_operator(pool, args.name, now, operator=args.operator,
                                                reason=args.reason)

    change = run_action(act, operators.OperatorAccountRefused, operators.OperatorNotFound)
    if args.json:  # the recorded action alone, as every operator action's --json prints
        print(json.dumps(change.recorded.as_json(), indent=2, ensure_ascii=False))
        return 0
    account = change.operator
    done = "added" if args.operators_command == "add" else "disabled"
    print(f"operator {account.name} ({account.role.value}) {done} by {args.operator}")
    return 0


def _table(found: list[Any]) -> list[str]:
    rows = [["NAME", "ROLE", "CREATED (UTC)", "DISABLED (UTC)"]]
    for o in found:
        rows.append([o.name, o.role.value, o.created_at.strftime("%Y-%m-%d %H:%M:%S"),
                     o.disabled_at.strftime("%Y-%m-%d %H:%M:%S") if o.disabled_at else "-"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
