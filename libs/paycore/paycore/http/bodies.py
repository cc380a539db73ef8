"""Reading request bodies with a size limit, and strict JSON object parsing."""

from __future__ import annotations

import json
from typing import Any

import orjson
from starlette.requests import Request

from paycore.errors import PaycoreError
from paycore.http.problems import Problem


async def read_limited(request: Request, limit: int) -> bytes:
    """The raw body, or a 413 problem once it exceeds ``limit`` bytes (checked while streaming)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise Problem(413, "body-too-large", "Request body too large", f"The limit is {limit} bytes.")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise Problem(413, "body-too-large", "Request body too large", f"The limit is {limit} bytes.")
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json_object(request: Request, limit: int, *, allow_empty: bool = False) -> dict[str, Any]:
    """A JSON object body; anything else is a 400/415 problem and nothing is written.

    The body must be declared ``application/json`` (a missing content type is
    415 like any other), and no object in it may repeat a key: parsers disagree
    on which of two values wins, and a payment API never guesses.
    """
    raw = await read_limited(request, limit)
    if not raw.strip() and allow_empty:
        return {}
    content_type = request.headers.get("content-type", "")
    if content_type.split(";")[0].strip().lower() != "application/json":
        raise Problem(415, "unsupported-media-type", "Unsupported media type",
                      "Send the body as application/json.")
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise Problem(400, "malformed-json", "Malformed JSON", "The body is not valid JSON.") from None
    if not isinstance(value, dict):
        raise Problem(400, "invalid-body", "Invalid body", "The body must be a JSON object.")
    duplicate = first_duplicate_key(raw)
    if duplicate is not None:
        raise Problem(400, "duplicate-key", "Duplicate key in JSON object",
                      "A key appears twice in one object; send each key once.",
                      errors=[{"field": duplicate[:64], "message": "appears more than once"}])
    return value


class _DuplicateKey(PaycoreError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, item in pairs:
        if key in seen:
            raise _DuplicateKey(key)
        seen[key] = item
    return seen


def first_duplicate_key(raw: bytes) -> str | None:
    """The first key repeated within one object, at any depth (orjson keeps the last silently).

    Runs only on a body orjson already accepted, so the standard parser here
    only looks at the object structure.
    """
    try:
        json.loads(raw, object_pairs_hook=_no_duplicates)
    except _DuplicateKey as exc:
        return exc.key
    return None
