"""Reading a provider's JSON answer the same way for every wire (Cardco's, Stripe's, Adyen's)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, TypeGuard

import orjson


class Unreadable:
    """Marker: the body is empty or not JSON."""


UNREADABLE: Final = Unreadable()


def read_json(body: bytes | str | None) -> Any:
    """The parsed body, or ``UNREADABLE`` (also for no body: the Stripe SDK may hand back ``None``,
    or the body as text)."""
    if body is None:
        return UNREADABLE
    raw = body.encode("utf-8", "surrogateescape") if isinstance(body, str) else body
    if not raw.strip():
        return UNREADABLE
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:  # also invalid UTF-8
        return UNREADABLE


def is_int(value: object) -> TypeGuard[int]:
    # bool is an int subclass; an amount of `true` is not an amount.
    return isinstance(value, int) and not isinstance(value, bool)


def optional_str(obj: Mapping[str, Any], key: str) -> tuple[bool, str | None]:
    """Whether ``obj[key]`` is absent, null or a string, and its value."""
    value = obj.get(key)
    return (value is None or isinstance(value, str)), value
