"""Message contracts: one JSON Schema (draft 2020-12) per outbox kind and major version.

``schemas/<kind>.v<N>.json`` describes the payload of a record of ``kind`` whose
``schema_version`` is ``N``. The relay checks every row before publishing it and
the consumer helper every record it receives (docs/dispatcher.md, "Message
contracts"; docs/asyncapi.yaml). Validators are compiled once per (kind, version):
the relay checks thousands of payloads a second, and a conforming payload is
accepted by a plain-Python check compiled from its schema (``fast``).

Problems are described by the payload path and the rule broken, never by the
offending value: they land in ``last_error``, escalations and logs, which must not
carry payload data.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator, ValidationError

from paycore.contracts.fast import Check, compile_accept
from paycore.errors import PaycoreError

SCHEMA_VERSION = 1  # what paycore.outbox.enqueue stamps on every payload
SCHEMAS_DIR = Path(__file__).parent / "schemas"
_FILE = re.compile(r"^(?P<kind>[a-z][a-z0-9-]*)\.v(?P<version>[1-9][0-9]*)\.json$")
_MAX_PROBLEMS = 5


class ContractViolation(PaycoreError):
    """A payload does not conform to its kind's schema (or its kind/version has none)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def schema_files() -> dict[tuple[str, int], Path]:
    """Every shipped schema, by (kind, version)."""
    found: dict[tuple[str, int], Path] = {}
    for path in sorted(SCHEMAS_DIR.glob("*.json")):
        match = _FILE.match(path.name)
        if match is not None:
            found[(match["kind"], int(match["version"]))] = path
    return found


def kinds() -> frozenset[str]:
    return frozenset(kind for kind, _ in schema_files())


def load_schema(kind: str, version: int = SCHEMA_VERSION) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((SCHEMAS_DIR / f"{kind}.v{version}.json").read_text("utf-8"))
    return schema


def example(kind: str, /, **fields: Any) -> dict[str, Any]:
    """A conforming payload of ``kind`` (its schema's first example), with ``fields`` replaced."""
    sample: dict[str, Any] = dict(load_schema(kind)["examples"][0])
    sample.update(fields)
    return sample


@functools.cache
def _validator(kind: str, version: int) -> tuple[Draft202012Validator, Check | None] | None:
    """The schema's validator and its fast acceptance check (paycore.contracts.fast), built once."""
    if (kind, version) not in schema_files():
        return None
    schema = load_schema(kind, version)
    Draft202012Validator.check_schema(schema)
    formats = Draft202012Validator.FORMAT_CHECKER
    return Draft202012Validator(schema, format_checker=formats), compile_accept(schema, formats)


def with_version(payload: Mapping[str, Any]) -> Mapping[str, Any]:
    """A payload without ``schema_version`` read as version 1.

    Rows queued by producers older than the contracts (during a rolling deploy) and
    records already on the topics carry none; their shape is v1 by definition.
    """
    return payload if "schema_version" in payload else {**payload, "schema_version": 1}


def validate(payload: Any) -> list[str]:
    """Why ``payload`` breaks its contract (empty when it conforms).

    The kind and version come from the payload itself; a kind or version with no
    schema here is a problem too.
    """
    if not isinstance(payload, Mapping):
        return ["$: the payload is not a JSON object"]
    kind, version = payload.get("kind"), payload.get("schema_version")
    if not isinstance(kind, str):
        return ["$.kind: required, a string naming the message kind"]
    if not isinstance(version, int) or isinstance(version, bool):
        return ["$.schema_version: required, an integer"]
    compiled = _validator(kind, version)
    if compiled is None:
        return [f"$.kind: no schema for kind {kind!r} version {version}"]
    validator, accept = compiled
    if accept is not None and accept(payload):  # nearly every payload: plain Python, no jsonschema
        return []
    if validator.is_valid(payload):  # jsonschema decides whatever the fast check did not accept
        return []
    errors = sorted(validator.iter_errors(payload), key=lambda e: list(e.absolute_path))
    return [f"{kind} v{version}: {describe(e)}" for e in errors[:_MAX_PROBLEMS]]


def check(payload: Any) -> None:
    """Raise :class:`ContractViolation` unless ``payload`` conforms."""
    problems = validate(payload)
    if problems:
        raise ContractViolation(problems)


def describe(error: ValidationError) -> str:
    """The path and the rule, from the schema side only (never the instance's value)."""
    path = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    rule, expected = error.validator, error.validator_value
    if rule == "required" and isinstance(expected, list):
        present = error.instance if isinstance(error.instance, Mapping) else {}
        missing = [name for name in expected if name not in present]
        return f"{path}: required property {', '.join(map(repr, missing))} missing"
    if rule in ("type", "format", "enum", "const", "pattern", "minimum", "maximum", "minLength", "maxLength"):
        return f"{path}: violates {rule} {json.dumps(expected)}"
    return f"{path}: violates {rule}"
