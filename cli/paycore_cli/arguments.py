"""The types of the ``paycore`` command's arguments: each refuses a bad value with a usage error."""

from __future__ import annotations

import argparse


def port_number(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {raw!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be between 1 and 65535, got {value}")
    return value


def admin_port_number(raw: str) -> int:
    """A port, or 0: serve no admin port."""
    return 0 if raw.strip() == "0" else port_number(raw)


def positive_int(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {raw!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def operator_handle(raw: str) -> str:
    from paycore.operator_actions import InvalidOperatorAction, validate_operator

    try:
        return validate_operator(raw)
    except InvalidOperatorAction as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def fraction(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {raw!r}") from None
    if not 0.0 <= value <= 0.9:
        raise argparse.ArgumentTypeError(f"must be between 0 and 0.9, got {value}")
    return value


def duration(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {raw!r}") from None
    if not 0 < value < 86_400:
        raise argparse.ArgumentTypeError(f"must be between 0 and 86400 seconds, got {value}")
    return value
