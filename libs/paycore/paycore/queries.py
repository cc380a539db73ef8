"""Named queries: each table's SQL in one ``.sql`` file, every query named, its parameters named.

A file under ``paycore/queries/`` holds one table's statements, river's way::

    -- name: mark_started
    -- Stamps the key window from the provider-account row in force now.
    UPDATE payment_attempts a
    SET state = 'Started', first_sent_at = :now, version = a.version + 1
    WHERE a.attempt_id = :attempt_id AND a.version = :version
    RETURNING a.*

:func:`load` reads a file once, at import. Each :class:`Query` keeps its SQL with asyncpg's
``$n`` placeholders, so asyncpg prepares and caches the statement by its text as before, and the
order of its names; a call binds by keyword only, and a missing or unknown name is a
:class:`TypeError` at the call rather than a value in the wrong place. Types stay PostgreSQL's:
a cast where the server cannot infer one (``:tokens::uuid[]``), as in any statement.

Why a loader of our own rather than ``aiosql``: docs/decisions/0007-named-queries.md.
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

import asyncpg

from paycore.errors import PaycoreError

__all__ = ["Queries", "Query", "QueryFileError", "load", "parse"]

QUERIES_DIR = Path(__file__).with_name("queries")

# A parameter: a colon and a name, not a cast's second colon (``::uuid``) nor inside a word.
_PARAMETER = re.compile(r"(?<![:\w]):([a-z_][a-z0-9_]*)")
# What a parameter is never looked for in: string literals, quoted names, comments.
_NOT_SQL = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*")
_NAME_LINE = re.compile(r"^--\s*name:\s*([a-z][a-z0-9_]*)\s*$")

Executor: TypeAlias = asyncpg.Connection | asyncpg.Pool


class QueryFileError(PaycoreError, ValueError):
    """A query file that does not say what it runs: a query without a name, a name twice, empty SQL."""


@dataclass(frozen=True)
class Query:
    """One named statement: its SQL with ``$n`` placeholders and the names they stand for."""

    name: str
    sql: str
    params: tuple[str, ...]  # the name of $1, $2, …
    doc: str = ""  # the comment lines under its name
    _pick: Callable[[Mapping[str, Any]], tuple[Any, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # The values in $n order, in C (operator.itemgetter): every statement runs through here.
        pick: Callable[[Mapping[str, Any]], Any] = operator.itemgetter(*self.params) if self.params \
            else (lambda _: ())
        object.__setattr__(self, "_pick", pick if len(self.params) != 1 else (lambda p: (pick(p),)))

    def args(self, **params: Any) -> tuple[Any, ...]:
        """The positional arguments for ``params``; every name given, no other."""
        if len(params) == len(self.params):  # the common case, checked in one pass
            try:
                return self._pick(params)
            except KeyError:
                pass  # as many names, not the same ones: say which below
        missing = [p for p in self.params if p not in params]
        unknown = sorted(set(params) - set(self.params))
        raise TypeError(f"query {self.name}: " + "; ".join(
            part for part in (f"missing {', '.join(missing)}" if missing else "",
                              f"unknown {', '.join(unknown)}" if unknown else "") if part))

    # Each returns asyncpg's own awaitable: no coroutine of ours around every statement.

    def fetch(self, db: Executor, **params: Any) -> Awaitable[list[asyncpg.Record]]:
        rows: Awaitable[list[asyncpg.Record]] = db.fetch(self.sql, *self.args(**params))
        return rows

    def fetchrow(self, db: Executor, **params: Any) -> Awaitable[asyncpg.Record | None]:
        row: Awaitable[asyncpg.Record | None] = db.fetchrow(self.sql, *self.args(**params))
        return row

    def fetchval(self, db: Executor, **params: Any) -> Awaitable[Any]:
        value: Awaitable[Any] = db.fetchval(self.sql, *self.args(**params))
        return value

    def execute(self, db: Executor, **params: Any) -> Awaitable[str]:
        status: Awaitable[str] = db.execute(self.sql, *self.args(**params))
        return status

    def executemany(self, db: asyncpg.Connection, rows: list[Mapping[str, Any]]) -> Awaitable[None]:
        done: Awaitable[None] = db.executemany(self.sql, [self.args(**row) for row in rows])
        return done


class Queries:
    """One file's queries, by name: ``Q.mark_started`` or ``Q["mark_started"]``."""

    def __init__(self, source: str, queries: Mapping[str, Query]) -> None:
        self._source = source
        self._queries = dict(queries)
        self.__dict__.update(self._queries)  # ``Q.name`` is a plain attribute (a hot path)

    def __getattr__(self, name: str) -> Query:
        try:
            return self._queries[name]
        except KeyError:
            raise AttributeError(f"{self._source} has no query named {name}") from None

    def __getitem__(self, name: str) -> Query:
        return self._queries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._queries)

    def __len__(self) -> int:
        return len(self._queries)

    def __contains__(self, name: object) -> bool:
        return name in self._queries


def _placeholders(body: str) -> tuple[str, tuple[str, ...]]:
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    out, at = [], 0
    for skipped in _NOT_SQL.finditer(body):
        out.append(_PARAMETER.sub(number, body[at:skipped.start()]))
        out.append(skipped.group(0))
        at = skipped.end()
    out.append(_PARAMETER.sub(number, body[at:]))
    return "".join(out), tuple(names)


def parse(text: str, source: str = "<sql>") -> Queries:
    """The named queries of one file's ``text``."""
    queries: dict[str, Query] = {}
    name: str | None = None
    doc: list[str] = []
    body: list[str] = []

    def close() -> None:
        if name is None:
            if "".join(body).strip():
                raise QueryFileError(f"{source}: SQL before the first '-- name:'")
            return
        while body and (not body[-1].strip() or body[-1].lstrip().startswith("--")):
            body.pop()  # a comment after the SQL is about what follows (a section), not this query
        sql = "\n".join(body).strip()
        if not sql:
            raise QueryFileError(f"{source}: query {name} has no SQL")
        if name in queries:
            raise QueryFileError(f"{source}: query {name} named twice")
        numbered, params = _placeholders(sql)
        queries[name] = Query(name, numbered, params, "\n".join(doc))

    for line in text.splitlines():
        named = _NAME_LINE.match(line.strip())
        if named:
            close()
            name, doc, body = named.group(1), [], []
        elif line.startswith("--") and not body:
            doc.append(line.removeprefix("--").strip())  # the query's comment, above its SQL
        else:
            body.append(line)
    close()
    return Queries(source, queries)


@functools.cache
def load(table: str, directory: Path = QUERIES_DIR) -> Queries:
    """The named queries of ``<directory>/<table>.sql`` (read once)."""
    path = directory / f"{table}.sql"
    return parse(path.read_text(encoding="utf-8"), path.name)
