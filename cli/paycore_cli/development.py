"""``paycore up`` and ``paycore chaos``, whose implementation is the development package.

``paycore-devstack`` (embedded PostgreSQL and Tansu, the supervisor, the chaos
run) is installed by ``make venv`` and never in the production image, so it is
imported only when a development command runs; without it these commands exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from types import ModuleType

from paycore_cli.common import CommandError

DEVSTACK = "paycore_devstack"
Handler = Callable[[argparse.Namespace], int]


def devstack(module: str, refusal: str) -> ModuleType:
    """``paycore_devstack.<module>``; without the package, a :class:`CommandError` (exit 2):
    ``refusal`` followed by how to install it."""
    try:
        return importlib.import_module(f"{DEVSTACK}.{module}")
    except ModuleNotFoundError as exc:
        if exc.name != DEVSTACK:
            raise
        raise CommandError(f"{refusal} install paycore-devstack (make venv)", code=2) from None


def cmd_up(args: argparse.Namespace) -> int:
    handler: Handler = devstack("up", "paycore up is a development command:").cmd_up
    return handler(args)


def cmd_chaos(args: argparse.Namespace) -> int:
    handler: Handler = devstack("chaos.command", "paycore chaos is a development command:").cmd_chaos
    return handler(args)


def is_embedded_error(exc: BaseException) -> bool:
    """Whether ``exc`` is the embedded servers' failure (reported without a traceback). Only a
    loaded development package can have raised one, so this imports nothing."""
    embedded = sys.modules.get(f"{DEVSTACK}.embedded")
    return embedded is not None and isinstance(exc, embedded.EmbeddedError)
