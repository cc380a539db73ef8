"""The one place that decides what a log line looks like, and which correlation ids it carries.

Every module logs through the standard library (``logging.getLogger("paycore....")``).
:func:`configure_logging` installs one handler on the root logger whose formatter is
either :class:`JsonFormatter` (one JSON object per line, for machines) or
:class:`TextFormatter` (for people, ``paycore up``'s default).

Correlation ids are bound once, where they become known, with :func:`bind_log_context`
(a context variable): every line logged inside, by paycore or by a library, across
awaits and in tasks started inside, carries them. ``trace_id``/``span_id`` come from
OpenTelemetry's current span when that package is installed and a span is recording.

What is logged must never hold secrets, tokens or card data: the formatter cannot
tell, so callers log ids, states and counts only (tests/checkout/test_log_hygiene.py
scans a whole scenario's lines). The one thing it does cut is a library's: httpx logs
every outbound request's full URL at INFO, and a URL can be a secret (a Slack incoming
webhook's path, a key in a query string), so that line keeps the URL's origin only.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import sys
import uuid
from collections.abc import Iterator, Mapping
from contextvars import ContextVar, Token
from datetime import UTC, datetime
from typing import Any, Literal, TextIO
from urllib.parse import urlsplit

import orjson

LogFormat = Literal["json", "text"]
LOG_FORMATS: tuple[LogFormat, ...] = ("json", "text")
# The fields bound by the code paths that learn them; shown in this order.
CORRELATION_FIELDS = ("request_id", "order_id", "attempt_id")

_context: ContextVar[Mapping[str, str]] = ContextVar("paycore_log_context", default={})  # noqa: B039 -- never mutated

# A LogRecord's own attributes; anything else on a record came from ``extra=``.
_RECORD_ATTRIBUTES = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}
# Extras some libraries attach that are presentation, not data (uvicorn's coloured copy).
_IGNORED_EXTRAS = frozenset({"color_message"})


def bind(**fields: object) -> Token[Mapping[str, str]]:
    """Add ``fields`` (``None`` values skipped) to the log context; undo with :func:`unbind`.

    Inside a :func:`bind_log_context` block an id learnt part-way may be bound without
    unbinding: the block's end restores the context as it was before the block."""
    merged = dict(_context.get())
    merged.update({k: str(v) for k, v in fields.items() if v is not None})
    return _context.set(merged)


def unbind(token: Token[Mapping[str, str]]) -> None:
    _context.reset(token)


@contextlib.contextmanager
def bind_log_context(**fields: object) -> Iterator[None]:
    """Every line logged inside carries ``fields`` (e.g. ``order_id=...``), also after awaits."""
    token = bind(**fields)
    try:
        yield
    finally:
        unbind(token)


def log_context() -> dict[str, str]:
    """The fields bound here: correlation ids and, inside a recording span, trace_id and span_id."""
    fields = dict(_context.get())
    fields.update(_trace_fields())
    return fields


# Tracing is optional: without OpenTelemetry a line simply has no trace ids. Imported by name so
# the type check passes whether or not it is installed.
try:
    _otel_trace: Any = importlib.import_module("opentelemetry.trace")
except ImportError:  # pragma: no cover - depends on the installation
    _otel_trace = None


def _trace_fields() -> dict[str, str]:
    if _otel_trace is None:
        return {}
    ctx = _otel_trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return {}
    return {"trace_id": format(ctx.trace_id, "032x"), "span_id": format(ctx.span_id, "016x")}


def url_origin(url: object) -> str:
    """``https://hooks.slack.com/…``: scheme, host and port; no credentials, path or query."""
    parts = urlsplit(str(url))
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}/…" if parts.scheme else "…"


def _message(record: logging.LogRecord) -> str:
    """The record's text; httpx's ``HTTP Request: <method> <url> ...`` with the URL's origin only."""
    if record.name == "httpx" and isinstance(record.args, tuple) and len(record.args) >= 2:
        args = (record.args[0], url_origin(record.args[1]), *record.args[2:])
        try:
            return str(record.msg) % args
        except (TypeError, ValueError):
            return f"HTTP request to {url_origin(record.args[1])}"
    return record.getMessage()


def _timestamp(record: logging.LogRecord) -> str:
    """UTC, ISO 8601, milliseconds, ``Z``: 2026-12-01T16:00:35.123Z."""
    stamp = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


def _json_safe(value: object) -> object | None:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, uuid.UUID):
        return str(value)
    return None  # not carried: a repr could leak whatever the object holds


def _extras(record: logging.LogRecord) -> dict[str, object]:
    found: dict[str, object] = {}
    for key, value in record.__dict__.items():
        if key in _RECORD_ATTRIBUTES or key in _IGNORED_EXTRAS or key.startswith("_"):
            continue
        safe = _json_safe(value)
        if safe is not None:
            found[key] = safe
    return found


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, service, logger, message, the bound fields, extras, exc."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": _timestamp(record), "level": record.levelname, "service": self.service,
            "logger": record.name, "message": _message(record),
        }
        for key, value in _extras(record).items():
            line.setdefault(key, value)
        line.update(log_context())  # the bound ids win over an extra of the same name
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exc"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(line).decode()


class TextFormatter(logging.Formatter):
    """For people: ``2026-12-01 16:00:35.123Z INFO    checkout paycore.x: message order_id=...``."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        stamp = _timestamp(record).replace("T", " ")
        text = f"{stamp} {record.levelname:<7} {self.service} {record.name}: {_message(record)}"
        fields = {**_extras(record), **log_context()}
        if fields:
            text += " " + " ".join(f"{k}={_quoted(str(v))}" for k, v in fields.items())
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        if record.stack_info:
            text += "\n" + self.formatStack(record.stack_info)
        return text


def _quoted(value: str) -> str:
    return orjson.dumps(value).decode() if (not value or any(c in value for c in ' "=\n')) else value


def formatter_for(service: str, fmt: LogFormat) -> logging.Formatter:
    return JsonFormatter(service) if fmt == "json" else TextFormatter(service)


class _PaycoreHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Ours, so a second :func:`configure_logging` replaces it instead of adding another."""


def configure_logging(service: str, level: int | str = logging.INFO, fmt: LogFormat = "json", *,
                      stream: TextIO | None = None) -> None:
    """Send every logger's lines to ``stream`` (stderr) in ``fmt``, stamped with ``service``.

    Called again (``paycore serve`` once it knows the service), it replaces its own handler.
    Without ``stream`` it leaves a root logger that already has someone else's handler alone
    (as ``logging.basicConfig`` does; pytest's capture is one), setting only the level.
    """
    root = logging.getLogger()
    root.setLevel(level)
    ours = [h for h in root.handlers if isinstance(h, _PaycoreHandler)]
    if stream is None and len(ours) < len(root.handlers):
        return
    for handler in ours:
        root.removeHandler(handler)
    handler = _PaycoreHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(formatter_for(service, fmt))
    root.addHandler(handler)
