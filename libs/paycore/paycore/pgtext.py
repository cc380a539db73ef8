"""What PostgreSQL's ``text`` and ``jsonb`` refuse, checked before anything is written.

PostgreSQL stores no NUL character in text (``invalid byte sequence … 0x00``)
and refuses ``\\u0000`` in jsonb; a lone UTF-16 surrogate cannot even be encoded
to UTF-8 for the wire. Text from outside (a verified webhook, a token claim)
that holds one must be handled at the boundary, not fail inside a transaction.
The same goes for an identifier too long for the unique index it lands in: a
btree entry over about 2.7 kB (after compression) is refused.
"""

from __future__ import annotations

import re
from typing import Any

# The longest identifier from outside stored in an indexed column (event ids,
# payment ids, references): 255 characters of UTF-8 are at most 1,020 bytes.
MAX_INDEXED_CHARS = 255

_NUL = "\x00"
_SURROGATE = re.compile("[\ud800-\udfff]")


def text_problem(text: str) -> str | None:
    """``"lone-surrogate"`` or ``"nul-character"`` when PostgreSQL cannot store ``text``, else None."""
    if _SURROGATE.search(text):
        return "lone-surrogate"
    if _NUL in text:
        return "nul-character"
    return None


def json_problem(value: Any) -> str | None:
    """What keeps a parsed JSON value out of PostgreSQL, from every string and key, else None.

    A lone surrogate wins over NUL: it also means a strict parser (orjson)
    refused the body, which callers may need to know.
    """
    found: str | None = None
    pending = [value]
    while pending:  # iterative: parsed JSON may nest deeper than Python's recursion limit
        item = pending.pop()
        if isinstance(item, str):
            why = text_problem(item)
            if why == "lone-surrogate":
                return why
            found = found or why
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return found
