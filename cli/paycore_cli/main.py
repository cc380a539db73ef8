"""The ``paycore`` entry point: parse, run the command's handler, turn its errors into exit codes."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from paycore.config import ConfigError
from paycore_cli.common import CommandError, configure_logging
from paycore_cli.development import is_embedded_error
from paycore_cli.parser import build_parser

# Commands that run until stopped, whose log is their output; every other command logs warnings only.
LONG_RUNNING = frozenset({"serve", "run", "up", "chaos"})


def service_name(args: argparse.Namespace) -> str:
    """What a process's log lines name as their service: ``checkout``, ``recovery``, ``consumer-email``."""
    if args.command == "serve":
        return str(args.service)
    if args.command == "run":
        return f"consumer-{args.consumer}" if args.worker == "consumer" else str(args.worker)
    return "paycore"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        configure_logging(service=service_name(args), one_shot=args.command not in LONG_RUNNING)
        return handler(args)
    except ConfigError as exc:
        print(f"paycore: configuration error: {exc}", file=sys.stderr)
        return 2
    except CommandError as exc:
        print(f"paycore: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print("paycore: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if is_embedded_error(exc) or _is_broker_unreachable(exc):
            print(f"paycore: {exc}", file=sys.stderr)
            return 1
        errors = sys.modules.get("paycore.errors")
        if errors is not None and isinstance(exc, errors.AdminPortInUse):
            print(f"paycore: {exc}", file=sys.stderr)
            return 1
        refusal = _database_refusal(exc)
        if refusal is not None:
            print(f"paycore: {refusal}", file=sys.stderr)
            return 1
        raise


def _database_refusal(exc: BaseException) -> str | None:
    """One line for what the database refused a command (a missing schema, a permission), instead of
    a traceback; ``None`` for anything else. Only a loaded asyncpg can have raised one."""
    asyncpg = sys.modules.get("asyncpg")
    if asyncpg is None or not isinstance(exc, asyncpg.PostgresError):
        return None
    if isinstance(exc, asyncpg.UndefinedTableError | asyncpg.UndefinedColumnError):
        return f"the database has no paycore schema, or an older one ({exc}): run `paycore migrate`"
    return f"the database refused: {type(exc).__name__}: {exc}"


def _is_broker_unreachable(exc: BaseException) -> bool:
    """A worker that found no Kafka broker (its message says what to check). Only a loaded
    paycore.kafka can have raised one, so this imports nothing."""
    kafka = sys.modules.get("paycore.kafka")
    return kafka is not None and isinstance(exc, kafka.BrokerUnreachable)


if __name__ == "__main__":
    raise SystemExit(main())
