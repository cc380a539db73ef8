"""One trace from the checkout request to the consumer's effect (paycore.tracing).

A payment through the real checkout app (served, against the sandbox and PostgreSQL), the
real relay to the real broker, and the real consumer helper, with an in-memory exporter on a
test tracer provider. What is asserted exactly:

- the server span of ``POST /orders/{order_id}/payment`` is the parent of the httpx span of
  the provider call and of the outcome write's queries;
- the outbox row stores the traceparent of that server span (the span current at enqueue);
- the relay's producer span is the server span's child, and the record's ``traceparent``
  header is the producer span's own;
- the consumer span's parent is the producer span, and the handler's queries are its children;
- all of it is one trace id.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route

from harness.servers import serve_asgi
from paycore import tracing
from paycore.clock import FakeClock, SystemClock
from paycore.config import ConfigError
from paycore.kafka import KafkaSettings
from paycore_dispatcher.demo_consumers import demo_consumer
from tests.support.stack import Stack, running_stack

from .support import effects, kafka_publisher, outbox_row, queue_bare, relay

FAST_GROUP = {"session_timeout_ms": 2_000, "heartbeat_interval_ms": 300, "retry_base_s": 0.05,
              "retry_max_s": 0.2}
PAY_ROUTE = "POST /orders/{order_id}/payment"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on for this test only: a test provider (with paycore's sampler) and its exporter."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=tracing.sampler({}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    try:
        yield exporter
    finally:
        tracing.uninstall()
        provider.shutdown()


@pytest.fixture
async def traced_stack(spans: InMemorySpanExporter, pool: asyncpg.Pool, db_dsn: str) -> AsyncIterator[Stack]:
    """Checkout built after tracing is installed, as ``paycore serve`` builds it."""
    async for s in running_stack(pool, db_dsn):
        yield s


def _parent(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def _id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.span_id


def _trace(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.trace_id


def _traceparent(span: ReadableSpan) -> str:
    assert span.context is not None
    return f"00-{span.context.trace_id:032x}-{span.context.span_id:016x}-{int(span.context.trace_flags):02x}"


def _one(found: list[ReadableSpan], what: str) -> ReadableSpan:
    assert len(found) == 1, f"{what}: {[s.name for s in found]}"
    return found[0]


def _is_query(span: ReadableSpan) -> bool:
    attributes = span.attributes or {}
    return span.kind is SpanKind.CLIENT and ("db.system" in attributes or "db.system.name" in attributes)


async def test_one_trace_runs_from_the_payment_request_through_the_outbox_and_kafka_to_the_consumer(
    traced_stack: Stack, spans: InMemorySpanExporter, ks: KafkaSettings
) -> None:
    stack = traced_stack
    order = await stack.shop.create_order()
    paid = await stack.shop.pay(order)
    assert paid.status_code == 200, paid.text
    assert paid.json()["state"] == "Succeeded"

    async with kafka_publisher(ks) as pub:
        assert (await relay(stack.pool, pub, stack.clock, ks).run_once()).published == 2
    consumer = demo_consumer("fulfillment", stack.pool, ks, SystemClock(),
                             group_id=f"trace-{uuid.uuid4().hex[:6]}", **FAST_GROUP)
    stop = asyncio.Event()
    task = asyncio.create_task(consumer.run(stop))
    try:
        async with asyncio.timeout(30):
            while consumer.stats.handled < 2:  # noqa: ASYNC110 -- the consumer's own count is the condition
                await asyncio.sleep(0.05)
    finally:
        stop.set()
        await task

    finished = spans.get_finished_spans()
    server = _one([s for s in finished if s.kind is SpanKind.SERVER and s.name == PAY_ROUTE], "server span")
    trace_id = _trace(server)
    in_trace = [s for s in finished if _trace(s) == trace_id]

    # The provider call: an httpx client span to the sandbox, the request's child.
    calls = [s for s in in_trace if s.kind is SpanKind.CLIENT and not _is_query(s)
             and str((s.attributes or {}).get("url.full", (s.attributes or {}).get("http.url", "")))
             .startswith(stack.sandbox.url)]
    assert calls and all(_parent(c) == _id(server) for c in calls), [c.attributes for c in calls]
    # The request's queries (the attempt and the outcome write) are its children too.
    assert [q for q in in_trace if _is_query(q) and _parent(q) == _id(server)]

    # The outbox rows store the traceparent of the span current at enqueue: the server span.
    rows = await stack.pool.fetch("SELECT message_id, traceparent FROM outbox_messages ORDER BY message_id")
    assert len(rows) == 2
    assert {r["traceparent"] for r in rows} == {_traceparent(server)}

    # The relay: one producer span per row, each a child of the server span.
    producers = {int((s.attributes or {})["paycore.outbox.message_id"]): s for s in in_trace
                 if s.kind is SpanKind.PRODUCER and s.name == f"send {ks.effects_topic}"}
    assert sorted(producers) == [r["message_id"] for r in rows]
    assert all(_parent(p) == _id(server) for p in producers.values())

    # The consumer: one span per message, each the child of that message's producer span,
    # and the handler's transaction (inbox insert, effect) inside it.
    processed = [s for s in finished
                 if s.kind is SpanKind.CONSUMER and s.name == f"process {ks.effects_topic}"]
    assert len(processed) == 2
    assert all(_trace(c) == trace_id for c in processed)
    assert sorted(_parent(c) or 0 for c in processed) == sorted(_id(p) for p in producers.values())
    for c in processed:
        assert [q for q in in_trace if _is_query(q) and _parent(q) == _id(c)], "no query in a consumer span"

    # On the wire: each record carries its producer span's traceparent.
    for message in await effects(ks, 2):
        assert message.message_id is not None
        producer = producers[message.message_id]
        assert message.headers["traceparent"] == _traceparent(producer)

    # A poll's queries (the relay's claims, the consumer's) start no trace of their own.
    assert not [q for q in finished if _is_query(q) and q.parent is None]


async def test_server_spans_are_named_by_route_template_and_probes_are_not_traced(
    spans: InMemorySpanExporter
) -> None:
    async def ok(request: Request) -> Response:
        return PlainTextResponse("ok")

    app = Starlette(routes=[Mount("/api", routes=[Route("/items/{item_id}", ok)]), Route("/healthz", ok)])
    tracing.instrument_app(app)
    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url) as http:
        assert (await http.get("/api/items/it_42")).status_code == 200
        assert (await http.get("/healthz")).status_code == 200
        assert (await http.get("/nowhere")).status_code == 404
    served = [(s.name, (s.attributes or {}).get("http.route")) for s in spans.get_finished_spans()
              if s.kind is SpanKind.SERVER]
    assert served == [("GET /api/items/{item_id}", "/api/items/{item_id}"), ("GET", None)]


async def test_with_tracing_off_the_row_stores_no_traceparent_and_the_record_has_no_header(
    pool: asyncpg.Pool, clock: FakeClock, ks: KafkaSettings
) -> None:
    assert tracing.configure_tracing("checkout", {}) is False
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)  # no SDK installed
    assert tracing.current_traceparent() is None
    mid = await queue_bare(pool, clock, f"attempt:{uuid.uuid4()}", "fulfillment-request")
    assert (await outbox_row(pool, mid))["traceparent"] is None
    async with kafka_publisher(ks) as pub:
        assert (await relay(pool, pub, clock, ks).run_once()).published == 1
    [message] = await effects(ks, 1)
    assert message.message_id == mid
    assert "traceparent" not in message.headers


# A process that turns tracing on from its environment, makes one span and exits (the SDK's
# exit hook flushes the batch).
ONE_SPAN = """
from paycore import tracing
assert tracing.configure_tracing("dispatcher")
with tracing.producer_span("payments.effects", None, []):
    pass
"""


async def test_with_an_otlp_endpoint_set_a_process_exports_its_spans_there_as_paycore_service() -> None:
    received: list[bytes] = []

    async def collect(request: Request) -> Response:
        received.append(await request.body())
        return Response(status_code=200)

    collector = Starlette(routes=[Route("/v1/traces", collect, methods=["POST"])])
    async with serve_asgi(collector) as url:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", ONE_SPAN, env={**env, "OTEL_EXPORTER_OTLP_ENDPOINT": url},
            stderr=asyncio.subprocess.PIPE)
        _, stderr = await asyncio.wait_for(process.communicate(), 30)
        assert process.returncode == 0, stderr.decode()
    body = b"".join(received)  # OTLP protobuf: the strings appear as they are
    assert b"paycore-dispatcher" in body and b"send payments.effects" in body


@pytest.mark.parametrize(("env", "expected"), [
    ({}, ()),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, ("otlp",)),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, ("otlp",)),
    ({"OTEL_TRACES_EXPORTER": "console"}, ("console",)),
    ({"OTEL_TRACES_EXPORTER": "otlp,console"}, ("otlp", "console")),
    ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, ()),
    ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, ()),
])
def test_the_otel_variables_decide_whether_tracing_is_on(env: dict[str, str],
                                                         expected: tuple[str, ...]) -> None:
    assert tracing.exporters(env) == expected
    assert tracing.enabled(env) is bool(expected)


@pytest.mark.parametrize("env", [
    {"OTEL_TRACES_EXPORTER": "zipkin"},
    {"OTEL_TRACES_SAMPLER": "jaeger_remote"},
    {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"},
])
def test_an_unsupported_otel_setting_is_a_configuration_error(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        tracing.exporters(env)
        tracing.sampler(env)


def test_the_service_name_is_otel_service_name_else_paycore_and_the_service() -> None:
    assert tracing.service_name("checkout", {}) == "paycore-checkout"
    assert tracing.service_name("checkout", {"OTEL_SERVICE_NAME": "shop-payments"}) == "shop-payments"


def test_the_sampler_honours_otel_traces_sampler() -> None:
    described: dict[str, Any] = {
        "": "ParentBased{root:AlwaysOnSampler",
        "always_off": "AlwaysOffSampler",
        "parentbased_traceidratio": "ParentBased{root:TraceIdRatioBased{0.25}",
    }
    for name, start in described.items():
        env = {"OTEL_TRACES_SAMPLER": name, "OTEL_TRACES_SAMPLER_ARG": "0.25"} if name else {}
        description = tracing.sampler(env).get_description()
        assert description.startswith(f"NoOrphanQueries{{{start}"), description


async def test_an_outbound_requests_span_keeps_only_the_urls_origin(spans: InMemorySpanExporter) -> None:
    """A Slack-style webhook URL's path is its secret: the client span, like the log line, keeps
    the origin only (the alerts worker exported the whole PAYCORE_ALERT_WEBHOOK_URL)."""
    token = "T0KEN" + uuid.uuid4().hex

    async def hook(request: Request) -> Response:
        return Response(status_code=200)

    app = Starlette(routes=[Route("/services/{token}", hook, methods=["POST"])])
    async with serve_asgi(app) as url, httpx.AsyncClient() as http:
        assert (await http.post(f"{url}/services/{token}?key={token}", json={})).status_code == 200
    [client] = [s for s in spans.get_finished_spans() if s.kind is SpanKind.CLIENT and not _is_query(s)]
    recorded = {k: v for k, v in (client.attributes or {}).items() if k in tracing.URL_ATTRIBUTES}
    assert recorded and set(recorded.values()) == {f"{url}/…"}
    assert token not in str(client.attributes) and token not in client.name
