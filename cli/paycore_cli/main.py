"""The ``paycore`` entry point: parse, run the command's handler, turn its errors into exit codes."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from paycore.config import ConfigError
from paycore_cli.common import CommandError, configure_logging
from paycore_cli.development import is_embedded_error
from paycore_cli.parser import build_parser


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
        configure_logging(service=service_name(args))
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
        raise


def _is_broker_unreachable(exc: BaseException) -> bool:
    """A worker that found no Kafka broker (its message says what to check). Only a loaded
    paycore.kafka can have raised one, so this imports nothing."""
    kafka = sys.modules.get("paycore.kafka")
    return kafka is not None and isinstance(exc, kafka.BrokerUnreachable)


if __name__ == "__main__":
    raise SystemExit(main())
