"""Generated mutants of the SQL the money path runs: each breaks one predicate, order or lock.

cosmic-ray mutates Python; a query is a string to it, so the conditions that guard money in
SQL (a ``WHERE`` conjunct, an ``ORDER BY``, ``FOR UPDATE``, ``ON CONFLICT``, a ``CHECK``) would
go unmutated. This module finds the SQL in a named-query file (``queries/*.sql``: each query's
statement), a Python module (its string literals that start with a statement keyword) or a
migration file, and generates, for each span:

- ``drop-conjunct``: each top-level conjunct of a ``WHERE`` becomes ``(<conjunct> OR TRUE)``
  (its parameters stay in use, so the statement still prepares);
- ``flip-comparison``: the conjunct's first top-level comparison flipped (``=`` to ``<>``,
  ``<`` to ``<=``, ``IS NULL`` to ``IS NOT NULL``, and back);
- ``drop-order-by``: an ``ORDER BY`` list removed;
- ``drop-lock``: a ``FOR [NO KEY] UPDATE [OF t] [SKIP LOCKED | NOWAIT]`` removed, and
  ``SKIP LOCKED`` alone removed (the claim then waits instead of skipping);
- ``drop-on-conflict``: ``ON CONFLICT … DO NOTHING`` removed (a duplicate then raises);
- ``swap-coalesce``: ``COALESCE(a, b)`` becomes ``COALESCE(b, a)`` (the new value wins);
- in migrations, ``drop-check`` (``CHECK (…)`` becomes ``CHECK (TRUE)``) and ``drop-unique``
  (``CREATE UNIQUE INDEX`` becomes ``CREATE INDEX``; ``UNIQUE (…)`` becomes ``CHECK (TRUE)``).

A mutant is a replacement of one character range of the pristine file, so it applies by
slicing and is reported by the line it starts on. Standard library only.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

STATEMENT = re.compile(r"^\s*(SELECT|UPDATE|INSERT|DELETE|WITH)\b", re.I)
# What ends a WHERE clause at its own depth.
CLAUSE_END = re.compile(
    r"\b(ORDER\s+BY|GROUP\s+BY|LIMIT|OFFSET|RETURNING|FOR\s+(NO\s+KEY\s+)?UPDATE|FOR\s+SHARE|ON\s+CONFLICT"
    r"|DO\s+(NOTHING|UPDATE)|UNION|HAVING|WINDOW)\b", re.I)
AND = re.compile(r"\bAND\b", re.I)
BETWEEN = re.compile(r"\bBETWEEN\b", re.I)
WHERE = re.compile(r"\bWHERE\b", re.I)
ORDER_BY = re.compile(r"\bORDER\s+BY\b", re.I)
ORDER_BY_END = re.compile(r"\b(LIMIT|OFFSET|FOR\s+(NO\s+KEY\s+)?UPDATE|FOR\s+SHARE)\b", re.I)
LOCK = re.compile(r"\s*\bFOR\s+(NO\s+KEY\s+)?UPDATE(\s+OF\s+\w+)?(\s+SKIP\s+LOCKED|\s+NOWAIT)?", re.I)
SKIP_LOCKED = re.compile(r"\s+SKIP\s+LOCKED\b", re.I)
ON_CONFLICT = re.compile(r"\s*\bON\s+CONFLICT\b[^;]*?\bDO\s+NOTHING\b", re.I | re.S)
COALESCE = re.compile(r"\bCOALESCE\s*\(", re.I)
CHECK = re.compile(r"\bCHECK\s*\(", re.I)
UNIQUE_INDEX = re.compile(r"\bCREATE\s+UNIQUE\s+INDEX\b", re.I)
UNIQUE_CONSTRAINT = re.compile(r"\bUNIQUE\s*\(", re.I)
IS_NULL = re.compile(r"\bIS\s+(NOT\s+)?NULL\b", re.I)
COMPARISON = re.compile(r"<>|!=|<=|>=|=|<|>")
FLIPPED = {"=": "<>", "<>": "=", "!=": "=", "<": "<=", "<=": "<", ">": ">=", ">=": ">"}


@dataclass(frozen=True)
class SqlMutant:
    """Replace ``[start, end)`` of the pristine file with ``replacement``."""

    file: str
    start: int
    end: int
    replacement: str
    operator: str
    line: int  # the line the replaced text starts on (1-based)

    def apply(self, source: str) -> str:
        return source[:self.start] + self.replacement + source[self.end:]


@dataclass(frozen=True)
class Span:
    """SQL text at ``[start, end)`` of its file."""

    start: int
    end: int


# -- finding the SQL ---------------------------------------------------------------------------


NAME_LINE = re.compile(r"^--\s*name:\s*(\w+)\s*$")


def query_spans(source: str) -> Iterator[tuple[str, Span]]:
    """Each named query's statement in a ``queries/*.sql`` file, with its name: from its first
    line that is not a comment to its last one (its doc and a following section's are left)."""
    offset, name = 0, None
    body: list[tuple[int, int]] = []  # (start, end) of the query's lines that are SQL
    for line in [*source.splitlines(keepends=True), "-- name: end\n"]:
        named = NAME_LINE.match(line.strip())
        if named:
            if name is not None and body:
                yield name, Span(body[0][0], body[-1][1])
            name, body = named.group(1), []
        elif line.strip() and not (line.lstrip().startswith("--") and not body):
            if not line.lstrip().startswith("--"):
                body.append((offset, offset + len(line.rstrip("\n"))))
        offset += len(line)


def query_at(source: str, position: int) -> str | None:
    """The name of the named query whose statement holds ``position``."""
    return next((name for name, span in query_spans(source) if span.start <= position < span.end), None)


def python_spans(source: str) -> Iterator[Span]:
    """The inner text of each string literal that starts with a statement keyword, or that
    continues one (a literal glued to a statement with ``+``)."""
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    in_statement = False
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type != tokenize.STRING:
            if tok.type == tokenize.NEWLINE:
                in_statement = False
            continue
        start = offsets[tok.start[0] - 1] + tok.start[1]
        end = offsets[tok.end[0] - 1] + tok.end[1]
        text = source[start:end]
        prefix = re.match(r"^[rRbBfFuU]*", text)
        assert prefix is not None
        quote = 3 if text[prefix.end():prefix.end() + 3] in ('"""', "'''") else 1
        inner_start, inner_end = start + prefix.end() + quote, end - quote
        inner = source[inner_start:inner_end]
        if STATEMENT.match(inner) or (in_statement and re.search(r"\b(WHERE|AND|SET|ON)\b", inner, re.I)):
            in_statement = True
            yield Span(inner_start, inner_end)


def _depth_scan(text: str, start: int) -> Iterator[tuple[int, int, bool]]:
    """(index, depth relative to ``start``, inside a quoted literal) for each character from ``start``."""
    depth, quoted = 0, False
    for i in range(start, len(text)):
        c = text[i]
        if c == "'" and not (quoted and i + 1 < len(text) and text[i + 1] == "'"):
            quoted = not quoted
        if not quoted:
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
        yield i, depth, quoted


def _clause_end(text: str, start: int) -> int:
    """Where the clause that starts at ``start`` ends: a clause keyword or a closing parenthesis
    at its own depth, or the end of the text."""
    for i, depth, quoted in _depth_scan(text, start):
        if quoted:
            continue
        if depth < 0:
            return i
        if depth == 0 and (i == 0 or not text[i - 1].isalnum()) and CLAUSE_END.match(text, i):
            return i
    return len(text)


def _top_level(text: str, start: int, end: int, pattern: re.Pattern[str]) -> list[re.Match[str]]:
    """Matches of ``pattern`` at depth 0 and outside quotes within ``[start, end)``."""
    found = []
    levels = {i: (d, q) for i, d, q in _depth_scan(text[:end], start)}
    for m in pattern.finditer(text, start, end):
        depth, quoted = levels.get(m.start(), (1, True))
        # The depth is counted after the character: an opening parenthesis is itself at depth 0.
        if text[m.start()] == "(":
            depth -= 1
        if depth == 0 and not quoted:
            found.append(m)
    return found


def conjuncts(text: str, where_end: int) -> list[tuple[int, int]]:
    """The top-level conjuncts of the WHERE clause whose keyword ends at ``where_end``."""
    end = _clause_end(text, where_end)
    ands = _top_level(text, where_end, end, AND)
    if _top_level(text, where_end, end, BETWEEN):  # x BETWEEN a AND b: its AND is not a conjunction
        return []
    bounds, cursor = [], where_end
    for m in [*ands, None]:
        stop = m.start() if m is not None else end
        piece = text[cursor:stop]
        lead = len(piece) - len(piece.lstrip())
        trail = len(piece) - len(piece.rstrip())
        if piece.strip():
            bounds.append((cursor + lead, stop - trail))
        if m is not None:
            cursor = m.end()
    return bounds


def _matching_paren(text: str, open_at: int) -> int:
    for i, depth, quoted in _depth_scan(text, open_at):
        if not quoted and depth == 0 and i > open_at:
            return i
    return -1


def _split_args(text: str, start: int, end: int) -> list[tuple[int, int]]:
    commas = [m.start() for m in _top_level(text, start, end, re.compile(","))]
    edges = [start, *[c + 1 for c in commas]]
    stops = [*commas, end]
    out = []
    for a, b in zip(edges, stops, strict=True):
        piece = text[a:b]
        out.append((a + len(piece) - len(piece.lstrip()), b - (len(piece) - len(piece.rstrip()))))
    return out


# -- the operators ------------------------------------------------------------------------------


def mutate_span(text: str) -> Iterator[tuple[int, int, str, str]]:
    """(start, end, replacement, operator) within one span of SQL text."""
    starts = [w.end() for w in WHERE.finditer(text) if not _quoted_at(text, w.start())]
    glued = re.match(r"\s*AND\b", text, re.I)  # a literal that continues a WHERE glued on with +
    for where_end in ([glued.end()] if glued else []) + starts:
        for a, b in conjuncts(text, where_end):
            conjunct = text[a:b]
            yield a, b, f"({conjunct} OR TRUE)", "drop-conjunct"
            nulls = _top_level(text, a, b, IS_NULL)
            comparisons = _top_level(text, a, b, COMPARISON)
            if nulls and (not comparisons or nulls[0].start() < comparisons[0].start()):
                null = nulls[0]
                flipped = "IS NULL" if null.group(1) else "IS NOT NULL"
                yield null.start(), null.end(), flipped, "flip-comparison"
            elif comparisons:
                c = comparisons[0]
                yield c.start(), c.end(), FLIPPED[c.group()], "flip-comparison"
    for order in ORDER_BY.finditer(text):
        end = _order_by_end(text, order.end())
        yield order.start(), end, "", "drop-order-by"
    for lock in LOCK.finditer(text):
        yield lock.start(), lock.end(), "", "drop-lock"
        skip = SKIP_LOCKED.search(text, lock.start(), lock.end())
        if skip is not None:
            yield skip.start(), skip.end(), "", "drop-skip-locked"
    for conflict in ON_CONFLICT.finditer(text):
        yield conflict.start(), conflict.end(), "", "drop-on-conflict"
    for coalesce in COALESCE.finditer(text):
        close = _matching_paren(text, coalesce.end() - 1)
        args = _split_args(text, coalesce.end(), close) if close > 0 else []
        if len(args) == 2:
            (a1, b1), (a2, b2) = args
            yield a1, b2, f"{text[a2:b2]}, {text[a1:b1]}", "swap-coalesce"


def _order_by_end(text: str, start: int) -> int:
    end = _clause_end(text, start)
    stop = ORDER_BY_END.search(text, start, end)
    stop_at = stop.start() if stop is not None else end
    while stop_at > start and text[stop_at - 1].isspace():
        stop_at -= 1
    return stop_at


def _quoted_at(text: str, index: int) -> bool:
    return any(q for i, _, q in _depth_scan(text[:index + 1], 0) if i == index)


def mutate_migration(text: str) -> Iterator[tuple[int, int, str, str]]:
    """Constraints of a migration file: each CHECK made vacuous, each uniqueness dropped."""
    for check in CHECK.finditer(text):
        close = _matching_paren(text, check.end() - 1)
        if close > 0:
            yield check.start(), close + 1, "CHECK (TRUE)", "drop-check"
    for unique in UNIQUE_INDEX.finditer(text):
        yield unique.start(), unique.end(), "CREATE INDEX", "drop-unique"
    for unique in UNIQUE_CONSTRAINT.finditer(text):
        close = _matching_paren(text, unique.end() - 1)
        if close > 0:
            yield unique.start(), close + 1, "CHECK (TRUE)", "drop-unique"


def line_of(source: str, offset: int) -> int:
    return source.count("\n", 0, offset) + 1


def mutants_of(file: str, source: str) -> list[SqlMutant]:
    """Every SQL mutant of a named-query file's statements, a Python module's queries, or a
    migration (any other ``.sql``)."""
    found: list[SqlMutant] = []
    spans: Iterable[Span] = ()
    if "/queries/" in file and file.endswith(".sql"):
        spans = [span for _, span in query_spans(source)]
    elif file.endswith(".sql"):
        for a, b, replacement, op in mutate_migration(source):
            found.append(SqlMutant(file, a, b, replacement, op, line_of(source, a)))
        return found
    else:
        spans = python_spans(source)
    for span in spans:
        text = source[span.start:span.end]
        for a, b, replacement, op in mutate_span(text):
            start, end = span.start + a, span.start + b
            found.append(SqlMutant(file, start, end, replacement, op, line_of(source, start)))
    return found
