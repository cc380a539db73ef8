"""JSON Schemas of the API's answers, derived from the dataclasses the answers are made of.

An answer is :func:`paycore_console.inspection.jsonable` of an inspection result (or an action's
:meth:`~paycore_console.actions.Done.as_json`), so its schema is read from the same dataclasses'
type hints: a field added to ``inspection.AttemptSummary`` is in the document at once. Each
dataclass is one component (``#/components/schemas/AttemptSummary``); every field is required,
since ``jsonable`` writes every one (``null`` where the type allows it). The mapping is
``jsonable``'s: datetimes are ISO 8601 strings, ages seconds, UUIDs strings, enums their values.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Mapping
from datetime import date, datetime, timedelta
from typing import Any
from uuid import UUID

Schema = dict[str, Any]

SCALARS: dict[Any, Schema] = {
    str: {"type": "string"}, int: {"type": "integer"}, bool: {"type": "boolean"},
    float: {"type": "number"}, datetime: {"type": "string", "format": "date-time"},
    date: {"type": "string", "format": "date"},
    timedelta: {"type": "number", "description": "seconds"}, UUID: {"type": "string", "format": "uuid"},
}


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


class Components:
    """The schemas components collected while deriving: one per dataclass, by class name."""

    def __init__(self) -> None:
        self.schemas: dict[str, Schema] = {}

    def of(self, hint: Any) -> Schema:
        """The schema of a value of type ``hint`` as ``jsonable`` writes it."""
        if hint is Any:
            return {}
        if hint in SCALARS:
            return dict(SCALARS[hint])
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            return {"type": "string", "enum": [m.value for m in hint]}
        if dataclasses.is_dataclass(hint) and isinstance(hint, type):
            return self.dataclass(hint)
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin in (types.UnionType, typing.Union):
            options = [self.of(a) for a in args if a is not type(None)]
            nullable = type(None) in args
            [only] = options if len(options) == 1 else [None]
            if nullable and only is not None and isinstance(only.get("type"), str) and "enum" not in only:
                return {**only, "type": [only["type"], "null"]}  # {"type": ["string", "null"]}
            return {"anyOf": [*options, *([{"type": "null"}] if nullable else [])]}
        if origin in (tuple, list):
            item = args[0] if args and (origin is list or args[-1] is Ellipsis) else Any
            return {"type": "array", "items": self.of(item)}
        if origin in (dict, Mapping) or hint in (dict, Mapping):
            return {"type": "object"}
        raise TypeError(f"no JSON schema for {hint!r}")

    def dataclass(self, cls: type) -> Schema:
        name = cls.__name__
        if name not in self.schemas:
            self.schemas[name] = {}  # a placeholder first: a class may (one day) refer to itself
            hints = typing.get_type_hints(cls)
            fields = [f.name for f in dataclasses.fields(cls)]
            self.schemas[name] = {"type": "object", "required": fields,
                                  "properties": {f: self.of(hints[f]) for f in fields}}
        return ref(name)


def page(items: Schema) -> Schema:
    """A listing: ``{"items": [...], "next_cursor": ...}``."""
    return {"type": "object", "required": ["items", "next_cursor"],
            "properties": {"items": {"type": "array", "items": items},
                           "next_cursor": {"type": ["string", "null"],
                                           "description": "pass it back as cursor for the next page; "
                                                          "null on the last page"}}}


def with_fields(base: Schema, extra: Mapping[str, Schema]) -> Schema:
    """``base`` and some more required fields (an escalation's status, an action's result)."""
    return {"allOf": [base, {"type": "object", "required": list(extra), "properties": dict(extra)}]}
