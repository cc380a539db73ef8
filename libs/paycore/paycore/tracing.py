"""OpenTelemetry traces: the one place that turns them on, and the spans paycore makes by hand.

Tracing is off unless the standard ``OTEL_*`` variables ask for it (see :func:`enabled`); off,
nothing but the OpenTelemetry API is imported and every span below is the API's no-op one. On,
:func:`configure_tracing` installs an SDK tracer provider exporting OTLP over HTTP and
instruments httpx (provider calls) and asyncpg (queries); each service's app factory calls
:func:`instrument_app` for the server spans.

A trace crosses the outbox and Kafka by hand rather than through an aiokafka instrumentation:
:func:`current_traceparent` is stored with the outbox row, the relay's :func:`producer_span`
is a child of it and puts its own ``traceparent`` in the record's headers, and the consumer
helper's :func:`consumer_span` is a child of that header. So a payment's trace runs from the
request through the provider call and the outcome write to the consumer's effect.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, MutableSequence, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Tracer, TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from paycore.config import ConfigError
from paycore.logs import url_origin

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.sampling import Sampler
    from starlette.applications import Starlette
    from starlette.types import Scope

TRACEPARENT = "traceparent"  # the W3C header: the outbox column and the Kafka header
EXPORTERS = ("otlp", "console")
# Probes and scrapes: a span every few seconds that says nothing about a payment.
UNTRACED_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})

_PROPAGATOR = TraceContextTextMapPropagator()
_state: dict[str, Any] = {"provider": None, "tracer": trace.NoOpTracer()}


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def exporters(env: Mapping[str, str]) -> tuple[str, ...]:
    """The span exporters the ``OTEL_*`` variables ask for; empty means tracing is off.

    ``OTEL_SDK_DISABLED=true`` turns it off; ``OTEL_TRACES_EXPORTER`` names exporters (``none``
    alone is off); unset, an OTLP endpoint variable turns OTLP on.
    """
    if _truthy(env.get("OTEL_SDK_DISABLED")):
        return ()
    named = [n.strip().lower() for n in (env.get("OTEL_TRACES_EXPORTER") or "").split(",") if n.strip()]
    if named:
        chosen = tuple(n for n in named if n != "none")
        unknown = [n for n in chosen if n not in EXPORTERS]
        if unknown:
            raise ConfigError("OTEL_TRACES_EXPORTER", f"unsupported exporter {unknown[0]!r} "
                                                      f"(paycore ships {', '.join(EXPORTERS)} and none)")
        return chosen
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if (endpoint or "").strip():
        return ("otlp",)
    return ()


def enabled(env: Mapping[str, str]) -> bool:
    return bool(exporters(env))


def service_name(service: str, env: Mapping[str, str]) -> str:
    return (env.get("OTEL_SERVICE_NAME") or "").strip() or f"paycore-{service}"


def configure_tracing(service: str, env: Mapping[str, str] = os.environ) -> bool:
    """Turn traces on for this process when ``env`` asks for it; returns whether it did.

    Call once, where the process starts and before its app or workers are built.
    """
    chosen = exporters(env)
    if not chosen:
        return False
    # The SDK and the exporter are imported only here: off costs nothing beyond the API.
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

    provider = SdkTracerProvider(resource=Resource.create({"service.name": service_name(service, env)}),
                                 sampler=sampler(env))
    for name in chosen:
        exporter: SpanExporter
        if name == "otlp":
            exporter = _otlp_exporter(env)
        else:
            exporter = ConsoleSpanExporter(service_name=service_name(service, env))
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # for any library that asks the global API
    install(provider)
    return True


def _otlp_exporter(env: Mapping[str, str]) -> Any:
    protocol = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf").strip()
    if protocol != "http/protobuf":
        raise ConfigError("OTEL_EXPORTER_OTLP_PROTOCOL",
                          f"paycore exports OTLP over http/protobuf, not {protocol!r}")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    # The endpoint as the specification derives it; headers, timeout, compression and
    # certificates the exporter reads from the process environment itself.
    endpoint = (env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or "").strip()
    base = (env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "").strip()
    if not endpoint and base:
        endpoint = base.rstrip("/") + "/v1/traces"
    return OTLPSpanExporter(endpoint=endpoint or None)


def sampler(env: Mapping[str, str]) -> Sampler:
    """``OTEL_TRACES_SAMPLER`` (default ``parentbased_always_on``) and its ``_ARG`` ratio, wrapped
    so that a query with no span around it (a worker's poll) starts no trace of its own."""
    from opentelemetry.sdk.trace import sampling

    name = (env.get("OTEL_TRACES_SAMPLER") or "parentbased_always_on").strip().lower()
    raw_arg = (env.get("OTEL_TRACES_SAMPLER_ARG") or "").strip()
    try:
        ratio = float(raw_arg) if raw_arg else 1.0
    except ValueError:
        ratio = -1.0
    if not 0.0 <= ratio <= 1.0:
        raise ConfigError("OTEL_TRACES_SAMPLER_ARG", f"must be a ratio from 0 to 1, got {raw_arg!r}")
    roots: dict[str, sampling.Sampler] = {"always_on": sampling.ALWAYS_ON, "always_off": sampling.ALWAYS_OFF,
                                          "traceidratio": sampling.TraceIdRatioBased(ratio)}
    base: sampling.Sampler
    if name in roots:
        base = roots[name]
    elif name.startswith("parentbased_") and name.removeprefix("parentbased_") in roots:
        base = sampling.ParentBased(roots[name.removeprefix("parentbased_")])
    else:
        raise ConfigError("OTEL_TRACES_SAMPLER", f"unsupported sampler {name!r} (paycore takes always_on, "
                                                 "always_off, traceidratio and their parentbased_ forms)")
    return _no_orphan_queries(base)


def _no_orphan_queries(base: Sampler) -> Sampler:
    from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult

    class NoOrphanQueries(Sampler):
        """Drops a database span that has no parent: the relay, the consumer and the recovery
        workers poll every fraction of a second, and each poll would otherwise be a trace."""

        def should_sample(self, parent_context: Any, trace_id: int, name: str, kind: SpanKind | None = None,
                          attributes: Any = None, links: Sequence[Any] | None = None,
                          trace_state: Any = None) -> SamplingResult:
            orphan = not trace.get_current_span(parent_context).get_span_context().is_valid
            if orphan and kind is SpanKind.CLIENT and attributes and (
                    "db.system" in attributes or "db.system.name" in attributes):
                return SamplingResult(Decision.DROP)
            return base.should_sample(parent_context, trace_id, name, kind, attributes, links, trace_state)

        def get_description(self) -> str:
            return f"NoOrphanQueries{{{base.get_description()}}}"

    return NoOrphanQueries()


def install(provider: TracerProvider) -> None:
    """Instrument httpx and asyncpg and make :func:`instrument_app` and the hand-made spans use
    ``provider``. :func:`configure_tracing` calls it; a test calls it with its own provider."""
    from opentelemetry.instrumentation.asyncpg import AsyncPGInstrumentor
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

    HTTPXClientInstrumentor().instrument(tracer_provider=provider, request_hook=_url_origin_only,
                                         async_request_hook=_async_url_origin_only)
    AsyncPGInstrumentor().instrument(tracer_provider=provider)  # type: ignore[no-untyped-call]
    _state["provider"] = provider
    _state["tracer"] = provider.get_tracer("paycore")


# Where httpx's client span keeps the request's URL (the old and the stable semantic conventions).
URL_ATTRIBUTES = ("http.url", "url.full")


def _url_origin_only(span: Any, request: Any) -> None:
    """An outbound request's span keeps the URL's origin only, as its log line does: a Slack or
    PagerDuty webhook URL's path is its secret, and exported spans leave the process."""
    if not span.is_recording():
        return
    recorded = getattr(span, "attributes", None) or {}
    for key in URL_ATTRIBUTES:
        if key in recorded:
            span.set_attribute(key, url_origin(recorded[key]))


async def _async_url_origin_only(span: Any, request: Any) -> None:
    _url_origin_only(span, request)


def uninstall() -> None:
    """Undo :func:`install` (tests: the instrumentation patches classes process-wide)."""
    if _state["provider"] is None:
        return
    from opentelemetry.instrumentation.asyncpg import AsyncPGInstrumentor
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

    HTTPXClientInstrumentor().uninstrument()
    AsyncPGInstrumentor().uninstrument()  # type: ignore[no-untyped-call]
    _state["provider"] = None
    _state["tracer"] = trace.NoOpTracer()


def instrument_app(app: Starlette) -> None:
    """Server spans for a Starlette app, named by route template; nothing when tracing is off."""
    provider = _state["provider"]
    if provider is None:
        return
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware

    def details(scope: Scope) -> tuple[str, dict[str, str]]:
        method = str(scope.get("method") or "HTTP")
        route = _route_template(app, scope)
        return (f"{method} {route}", {"http.route": route}) if route else (method, {})

    app.add_middleware(OpenTelemetryMiddleware, tracer_provider=provider, default_span_details=details,
                       excluded_urls=",".join(f"{p}$" for p in sorted(UNTRACED_PATHS)),
                       exclude_spans=["receive", "send"])


def _route_template(app: Starlette, scope: Scope) -> str | None:
    """``/orders/{order_id}/payment``, not the path with its ids: one span name per route."""
    from starlette.routing import Match, Mount

    routes: Sequence[Any] = app.routes
    prefix = ""
    scope = dict(scope)
    while True:
        for route in routes:
            match, child = route.matches(scope)
            if match is Match.FULL:
                break
        else:
            return None
        if isinstance(route, Mount):
            prefix += route.path
            scope.update(child)
            routes = route.routes
            continue
        return prefix + str(route.path)


def current_traceparent() -> str | None:
    """The W3C traceparent of the current span, or None when there is no valid one (tracing off)."""
    if not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get(TRACEPARENT)


def _tracer() -> Tracer:
    tracer: Tracer = _state["tracer"]
    return tracer


@contextmanager
def producer_span(topic: str, traceparent: str | None, headers: MutableSequence[tuple[str, bytes]],
                  attributes: Mapping[str, str | int] | None = None) -> Iterator[Span]:
    """The relay's span for one send of one outbox row, a child of the row's stored
    ``traceparent``; adds the ``traceparent`` header that makes the consumer's span its child.

    A row stored without one (tracing off where it was queued) gets a span of its own when
    tracing is on here; with tracing off here the stored one passes through as the header.
    """
    parent = _PROPAGATOR.extract({TRACEPARENT: traceparent}) if traceparent else None
    with _tracer().start_as_current_span(
        f"send {topic}", context=parent, kind=SpanKind.PRODUCER,
        attributes={"messaging.system": "kafka", "messaging.operation.type": "send",
                    "messaging.destination.name": topic, **(attributes or {})},
    ) as span:
        carrier: dict[str, str] = {}
        if span.get_span_context().is_valid:
            _PROPAGATOR.inject(carrier)
        sent = carrier.get(TRACEPARENT) or traceparent
        if sent:
            headers.append((TRACEPARENT, sent.encode()))
        yield span


def start_producer_span(topic: str, traceparent: str | None, headers: MutableSequence[tuple[str, bytes]],
                        attributes: Mapping[str, str | int] | None = None) -> Span:
    """:func:`producer_span` for a send whose acknowledgement comes later: started, *not* made
    current, the ``traceparent`` header added; the caller ends it (and marks a failure).

    The relay hands a whole wave of records to the producer at once and ends each span when
    that record's acknowledgement arrives, so no span can be the current one. With tracing off
    it is one ``append`` (the stored traceparent passes through) and the shared no-op span.
    """
    if _state["provider"] is None:  # off: no span to make, no context to build (hot path)
        if traceparent:
            headers.append((TRACEPARENT, traceparent.encode()))
        return trace.INVALID_SPAN
    parent = _PROPAGATOR.extract({TRACEPARENT: traceparent}) if traceparent else None
    span = _tracer().start_span(
        f"send {topic}", context=parent, kind=SpanKind.PRODUCER,
        attributes={"messaging.system": "kafka", "messaging.operation.type": "send",
                    "messaging.destination.name": topic, **(attributes or {})},
    )
    carrier: dict[str, str] = {}
    if span.get_span_context().is_valid:
        _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    sent = carrier.get(TRACEPARENT) or traceparent
    if sent:
        headers.append((TRACEPARENT, sent.encode()))
    return span


@contextmanager
def consumer_span(topic: str, headers: Mapping[str, str], attributes: Mapping[str, str | int] | None = None
                  ) -> Iterator[Span]:
    """A consumer's span for handling one record: a child of the record's ``traceparent`` header
    (the relay's producer span), a trace of its own without one; no-op when tracing is off."""
    traceparent = headers.get(TRACEPARENT)
    parent = _PROPAGATOR.extract({TRACEPARENT: traceparent}) if traceparent else None
    with _tracer().start_as_current_span(
        f"process {topic}", context=parent, kind=SpanKind.CONSUMER,
        attributes={"messaging.system": "kafka", "messaging.operation.type": "process",
                    "messaging.destination.name": topic, **(attributes or {})},
    ) as span:
        yield span
