"""paycore.logs: the shape of a line, and correlation ids bound once and carried everywhere."""

from __future__ import annotations

import asyncio
import io
import logging
import re
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from harness.servers import serve_asgi
from paycore.http.request_id import request_id_from
from paycore.logs import bind, bind_log_context, configure_logging, log_context
from paycore_cli.common import LOG_FORMAT
from paycore_cli.main import service_name
from paycore_cli.parser import build_parser

TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


@pytest.fixture
def out() -> Iterator[io.StringIO]:
    """The root logger's lines, as ``paycore serve checkout`` would write them, into a buffer."""
    stream = io.StringIO()
    root = logging.getLogger()
    before_level, before = root.level, list(root.handlers)
    configure_logging("checkout", logging.DEBUG, "json", stream=stream)
    try:
        yield stream
    finally:
        for handler in [h for h in root.handlers if h not in before]:
            root.removeHandler(handler)
        root.setLevel(before_level)


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    parsed = [orjson.loads(line) for line in stream.getvalue().splitlines()]
    assert all(isinstance(p, dict) for p in parsed)
    return [p for p in parsed if p["logger"] != "asyncio"]  # the event loop's own start-up line


def test_a_json_line_has_utc_time_level_service_logger_and_message(out: io.StringIO) -> None:
    logging.getLogger("paycore.test").info("paid %s", "ord_1", extra={"count": 2, "blob": object()})
    [line] = lines(out)
    assert TS.fullmatch(line["ts"])
    assert line["level"] == "INFO" and line["service"] == "checkout" and line["logger"] == "paycore.test"
    assert line["message"] == "paid ord_1"
    assert line["count"] == 2 and "blob" not in line  # extras only when JSON-safe, never a repr
    assert "exc" not in line and "request_id" not in line


def test_an_exception_is_one_line_with_its_traceback(out: io.StringIO) -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("paycore.test").exception("failed")
    assert len(out.getvalue().splitlines()) == 1
    [line] = lines(out)
    assert line["level"] == "ERROR" and "ValueError: boom" in line["exc"] and "Traceback" in line["exc"]


async def test_bound_fields_follow_awaits_tasks_and_library_loggers_and_end_with_the_block(
        out: io.StringIO) -> None:
    async def in_a_task() -> None:
        await asyncio.sleep(0)
        logging.getLogger("httpx").debug("library line")

    with bind_log_context(request_id="req-1", order_id="ord_9"):
        await asyncio.sleep(0)
        bind(attempt_id="att-1")  # learnt later: lasts until the enclosing block ends
        logging.getLogger("paycore.checkout").info("inside")
        await asyncio.create_task(in_a_task())
    logging.getLogger("paycore.checkout").info("after")
    inside, library, after = lines(out)
    for line in (inside, library):
        assert (line["request_id"], line["order_id"], line["attempt_id"]) == ("req-1", "ord_9", "att-1")
    assert library["logger"] == "httpx"
    assert not {"request_id", "order_id", "attempt_id"} & after.keys()
    assert log_context() == {}


async def test_concurrent_requests_keep_their_own_ids(out: io.StringIO) -> None:
    async def request(rid: str) -> None:
        with bind_log_context(request_id=rid):
            for _ in range(3):
                await asyncio.sleep(0)
                logging.getLogger("paycore.test").info(rid)

    await asyncio.gather(request("a"), request("b"))
    assert all(line["request_id"] == line["message"] for line in lines(out))


def test_the_text_format_shows_date_utc_time_zone_and_the_bound_ids() -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    level = root.level
    configure_logging("recovery", logging.INFO, "text", stream=stream)
    try:
        with bind_log_context(order_id="ord_1", attempt_id="a b"):
            logging.getLogger("paycore.recovery").warning("looked up")
    finally:
        root.removeHandler(root.handlers[-1])
        root.setLevel(level)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z WARNING recovery paycore\.recovery: "
                        r'looked up order_id=ord_1 attempt_id="a b"\n', stream.getvalue())


def test_trace_ids_come_from_the_current_opentelemetry_span(out: io.StringIO) -> None:
    sdk = pytest.importorskip("opentelemetry.sdk.trace")  # tracing is optional
    tracer = sdk.TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("pay") as span:
        logging.getLogger("paycore.test").info("traced")
    logging.getLogger("paycore.test").info("untraced")
    traced, untraced = lines(out)
    assert traced["trace_id"] == format(span.get_span_context().trace_id, "032x")
    assert re.fullmatch(r"[0-9a-f]{16}", traced["span_id"])
    assert "trace_id" not in untraced


def test_a_client_request_id_is_kept_only_when_sane() -> None:
    def rid(value: bytes) -> str:
        return request_id_from([(b"x-request-id", value)])

    assert rid(b"client-1.2:3_x") == "client-1.2:3_x"
    for garbage in (b"", b"a b", b"x" * 129, b"id\nforged", "é".encode(), b"a;b"):
        assert re.fullmatch(r"[0-9a-f]{32}", rid(garbage)), garbage
    assert request_id_from([]) != request_id_from([])


def test_the_log_format_setting_and_each_process_service_name() -> None:
    assert LOG_FORMAT.read({}) == "json" and LOG_FORMAT.read({"PAYCORE_LOG_FORMAT": "TEXT"}) == "text"
    parser = build_parser()
    assert service_name(parser.parse_args(["serve", "webhooks"])) == "webhooks"
    assert service_name(parser.parse_args(["run", "recovery"])) == "recovery"
    assert service_name(parser.parse_args(["run", "consumer", "email"])) == "consumer-email"
    assert service_name(parser.parse_args(["migrate"])) == "paycore"


def test_a_consumed_message_binds_its_attempt_and_order_only_when_well_formed() -> None:
    from paycore.consumer import Message, correlation

    def message(headers: dict[str, str], payload: dict[str, Any]) -> Message:
        return Message("payments.effects", 0, 1, None, headers, payload)

    good = message({"attempt_id": "12af8b67-93fe-45bb-9414-876fec6b2021"}, {"order_id": "ord_1"})
    assert correlation(good) == {"attempt_id": "12af8b67-93fe-45bb-9414-876fec6b2021", "order_id": "ord_1"}
    assert correlation(message({"attempt_id": "x\ny"}, {"order_id": 7})) == {}


async def test_an_outbound_request_line_keeps_the_url_origin_only(out: io.StringIO) -> None:
    """httpx logs each request's URL at INFO; a Slack webhook URL is a secret, so only its origin stays."""
    async def hook(request: Request) -> Response:
        return Response(status_code=202)

    path = "/services/T000/B000/XXXXsecretXXXX"
    app = Starlette(routes=[Route(path, hook, methods=["POST"])])
    async with serve_asgi(app) as base, httpx.AsyncClient() as http:
        origin = base.removeprefix("http://")
        sent = await http.post(f"http://user:pw@{origin}{path}?token=abc", json={})
    assert sent.status_code == 202
    [line] = [p for p in lines(out) if p["logger"] == "httpx"]
    assert line["message"] == f'HTTP Request: POST http://{origin}/… "HTTP/1.1 202 Accepted"'
    logged = out.getvalue()
    assert "secret" not in logged and "token=abc" not in logged and "pw@" not in logged
