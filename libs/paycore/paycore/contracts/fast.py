"""A fast acceptance check compiled from a schema, for the payloads that conform (nearly all).

jsonschema interprets a schema keyword by keyword (about 0.2-0.4 ms for a payload of
ten fields here); the relay checks thousands of rows a second. :func:`compile_accept`
turns a schema built from the small set of keywords below into plain Python that
says "conforms" only when jsonschema would too: it is at least as strict as each
keyword (formats go through jsonschema's own checker; a canonical uuid is matched
first). The check is generated as one straight-line function per schema (see
:func:`_generate`). Any "no" is handed to jsonschema, which decides and explains. A
schema using any other keyword gets no fast check at all (None).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from jsonschema import FormatChecker

Check = Callable[[Any], bool]

_ANNOTATIONS = frozenset({"$schema", "$id", "$comment", "title", "description", "examples", "default",
                          "deprecated"})
_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,), "null": (type(None),),
    "object": (Mapping,),
}

# 8-4-4-4-12 hex digits and nothing after (``\Z``, not ``$``, which allows a final newline):
# a string of this form is one jsonschema's "uuid" format accepts.
_CANONICAL_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\Z")


def _same(a: Any, b: Any) -> bool:
    """Equal *and* of one type, so ``True`` never passes for ``1`` (stricter than JSON equality)."""
    return type(a) is type(b) and bool(a == b)


def _is_type(types: tuple[type, ...], bool_ok: bool) -> Check:
    if bool_ok:
        return lambda v: isinstance(v, types)
    return lambda v: isinstance(v, types) and v.__class__ is not bool  # bool is an int to Python, not JSON


def _keyword_check(keyword: str, expected: Any, formats: FormatChecker) -> Check | None:
    if keyword == "type":
        names = [expected] if isinstance(expected, str) else list(expected)
        if any(n not in _TYPES for n in names):
            return None
        return _is_type(tuple(t for n in names for t in _TYPES[n]), "boolean" in names)
    if keyword == "const":
        return lambda v: _same(v, expected)
    if keyword == "enum":
        options = list(expected)
        return lambda v: any(_same(v, o) for o in options)
    if keyword == "pattern":
        rx = re.compile(expected)
        return lambda v: not isinstance(v, str) or rx.search(v) is not None
    if keyword == "minLength":
        return lambda v: not isinstance(v, str) or len(v) >= expected
    if keyword == "minimum":
        return lambda v: not isinstance(v, int | float) or v >= expected
    if keyword == "format" and expected == "uuid":
        # The canonical form is a plain match; anything else (other spellings that UUID()
        # parses, non-strings) goes to jsonschema's checker, which parses it (profiled: the
        # parse was a third of the relay's contract check).
        return lambda v: (v.__class__ is str and _CANONICAL_UUID.match(v) is not None) \
            or bool(formats.conforms(v, expected))
    if keyword == "format":
        return lambda v: bool(formats.conforms(v, expected))
    return None


def _value_checks(schema: Mapping[str, Any], formats: FormatChecker) -> list[tuple[str, Any, Check]] | None:
    """(keyword, expected, check) for each keyword of a property's schema; None if one has no check."""
    checks: list[tuple[str, Any, Check]] = []
    for keyword, expected in schema.items():
        if keyword in _ANNOTATIONS:
            continue
        check = _keyword_check(keyword, expected, formats)
        if check is None:
            return None
        checks.append((keyword, expected, check))
    return checks


def _inline(keyword: str, expected: Any, check: Check, bind: Callable[[Any], str]) -> str:
    """A Python expression over ``v`` that is true exactly when ``check(v)`` is (the same tests,
    without a call); ``bind`` names a value for the generated function's namespace."""
    if keyword == "type":
        names = [expected] if isinstance(expected, str) else list(expected)
        types = bind(tuple(t for n in names for t in _TYPES[n]))
        if "boolean" in names:
            return f"isinstance(v, {types})"
        return f"(isinstance(v, {types}) and v.__class__ is not bool)"
    if keyword == "const":
        return f"(type(v) is {bind(type(expected))} and bool(v == {bind(expected)}))"
    if keyword == "minLength":
        return f"(not isinstance(v, str) or len(v) >= {bind(expected)})"
    if keyword == "minimum":
        return f"(not isinstance(v, (int, float)) or v >= {bind(expected)})"
    if keyword == "pattern":
        return f"(not isinstance(v, str) or {bind(re.compile(expected).search)}(v) is not None)"
    if keyword == "format" and expected == "uuid":
        return f"((v.__class__ is str and {bind(_CANONICAL_UUID.match)}(v) is not None) or {bind(check)}(v))"
    return f"{bind(check)}(v)"


def _object_check(schema: Mapping[str, Any], formats: FormatChecker) -> Check | None:
    required = tuple(schema.get("required", ()))
    props: list[tuple[str, list[tuple[str, Any, Check]]]] = []
    for name, sub in schema.get("properties", {}).items():
        checks = _value_checks(sub, formats)
        if checks is None:
            return None
        props.append((name, checks))
    rest = {k: v for k, v in schema.items() if k not in ("properties", "required")}
    conditional: tuple[str, Any, tuple[str, ...]] | None = None
    # The one conditional form compiled: if {"properties": {f: {"const": c}}, "required": [f]}
    # then {"required": [...]}.
    if "if" in rest:
        cond, then = rest.pop("if"), rest.pop("then", None)
        if not isinstance(then, Mapping) or set(then) != {"required"}:
            return None
        if set(cond) != {"properties", "required"} or len(cond["properties"]) != 1:
            return None
        [(field, sub)] = cond["properties"].items()
        if set(sub) != {"const"} or list(cond["required"]) != [field]:
            return None
        conditional = (field, sub["const"], tuple(then["required"]))
    if rest.pop("type", "object") != "object" or rest.pop("additionalProperties", True) is not True:
        return None
    if set(rest) - _ANNOTATIONS:
        return None

    return _generate(required, props, conditional)


_MISSING = object()


def _generate(required: tuple[str, ...], props: list[tuple[str, list[tuple[str, Any, Check]]]],
              conditional: tuple[str, Any, tuple[str, ...]] | None) -> Check:
    """The acceptance check as one straight-line function: a property's checks are one
    expression and there are no loops (the relay runs it for every row; the loop with a call
    per keyword took ~6 us a payload of nine fields, the generated function ~2 us).

    The source holds generated names only: every schema value (names, constants, the checks
    themselves) is bound in the function's namespace, never written into the source.
    """
    ns: dict[str, Any] = {"Mapping": Mapping, "MISSING": _MISSING}

    def bind(value: Any) -> str:
        name = f"k{len(ns)}"
        ns[name] = value
        return name

    lines = ["def accept(payload):",
             "    if payload.__class__ is not dict and not isinstance(payload, Mapping):",
             "        return False"]
    if required:
        for i, name in enumerate(required):
            ns[f"r{i}"] = name
        lines += [f"    if not ({' and '.join(f'r{i} in payload' for i in range(len(required)))}):",
                  "        return False"]
    for i, (name, checks) in enumerate(props):
        ns[f"p{i}"] = name
        calls = [_inline(keyword, expected, check, bind) for keyword, expected, check in checks]
        if calls:
            lines += [f"    v = payload.get(p{i}, MISSING)",
                      f"    if v is not MISSING and not ({' and '.join(calls)}):",
                      "        return False"]
    if conditional is not None:
        ns["conditional"] = conditional
        ns["same"] = _same
        lines += ["    field, value, needed = conditional",
                  "    if field in payload and same(payload[field], value) \\",
                  "            and any(n not in payload for n in needed):",
                  "        return False"]
    lines.append("    return True")
    exec("\n".join(lines), ns)  # generated names only; see the docstring
    accept: Check = ns["accept"]
    return accept


def compile_accept(schema: Mapping[str, Any], formats: FormatChecker) -> Check | None:
    """A check that returns True only for payloads ``schema`` accepts, or None if unsupported."""
    return _object_check(schema, formats)
