"""OpenTelemetry traces: one span per conversation request, the upstream call its child.

Off unless ``otel: true``; when off, nothing here imports ``opentelemetry`` (the server
pays no import cost). When on, the SDK is configured from the standard ``OTEL_*``
variables (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``,
``OTEL_EXPORTER_OTLP_ENDPOINT``/``_TRACES_ENDPOINT``, ``_HEADERS``, ``_TIMEOUT``,
``OTEL_SDK_DISABLED``) and spans go out over OTLP/HTTP in batches, off the request path
(``pip install 'context-engine[otel]'``).

A span is made from the finished ledger row, with the times the request path measured:
it starts when the request arrived and ends when the last response byte was relayed;
``upstream`` starts when the request went upstream. Attributes (``context_engine.*``):
session, model, api, mode, arm, tokens before and after, each rule's saved tokens and
milliseconds, billed, cached and cache-write tokens, where the cached prefix broke and
which rule broke it, failed open, status. When the client sent a W3C ``traceparent``,
the span joins that trace as its child (the ledger row keeps the header). The client's
trace headers are forwarded upstream untouched; the proxy adds none (transparency).
"""

from __future__ import annotations

import logging
from typing import Any

from context_engine.proxy.recording.ledger import Ledger, LedgerRow
from context_engine.proxy.sanitize import MAX_MODEL_CHARS

log = logging.getLogger("context_engine.tracing")
SCOPE = "context_engine"
NS = 1_000_000_000
MAX_ATTRIBUTE_CHARS = MAX_MODEL_CHARS  # client-controlled strings (model, session, path)


def make_tracer(exporter: Any = None) -> RequestTracer:
    """A tracer exporting over OTLP/HTTP (batched), or to ``exporter`` (tests: the SDK's
    ``InMemorySpanExporter``, exported as each span ends)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = Resource.create({"service.name": "context-engine"})
    provider = TracerProvider(resource=resource)
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    else:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    return RequestTracer(provider)


def attributes(row: LedgerRow) -> dict[str, Any]:
    """The span's attributes (OpenTelemetry takes str, bool, int and float; None is left out)."""
    attrs: dict[str, Any] = {
        "context_engine.session": row.session, "context_engine.model": row.model,
        "gen_ai.request.model": row.model, "context_engine.api": row.api,
        "context_engine.mode": row.mode, "context_engine.arm": row.arm,
        "context_engine.replica": row.replica, "url.path": row.path,
        "context_engine.tokens_before": row.tokens_original,
        "context_engine.tokens_after": row.tokens_sent,
        "context_engine.tokens_saved": row.tokens_original - row.tokens_sent,
        "context_engine.prompt_tokens": row.prompt_tokens,
        "context_engine.cached_tokens": row.cached_tokens,
        "context_engine.cache_write_tokens": row.cache_write_tokens,
        "context_engine.completion_tokens": row.completion_tokens,
        "context_engine.prefix_kept_tokens": row.prefix_kept_tokens,
        "context_engine.prefix_break_index": row.prefix_break_index,
        "context_engine.prefix_break_rule": row.prefix_break_rule or None,
        "context_engine.failed_open": row.failed_open, "context_engine.stream": row.stream,
        "context_engine.proxy_ms": row.proxy_ms,
        "http.response.status_code": row.status,
    }
    for rule, saved in row.rule_savings.items():
        attrs[f"context_engine.rule.{rule}.saved_tokens"] = saved
    for entry in row.journal:
        attrs[f"context_engine.rule.{entry.get('rule')}.ms"] = entry.get("ms")
    return {k[:MAX_ATTRIBUTE_CHARS]: v[:MAX_ATTRIBUTE_CHARS] if isinstance(v, str) else v
            for k, v in attrs.items() if isinstance(v, (str, bool, int, float))}


class RequestTracer:
    def __init__(self, provider: Any) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer(SCOPE)

    def emit(self, row: LedgerRow) -> None:
        """The request's span and its ``upstream`` child, timed as the row says."""
        from opentelemetry import trace
        from opentelemetry.trace import SpanKind, Status, StatusCode
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        start = int(row.ts * NS)
        sent = start + int(row.proxy_ms * 1e6)
        end = sent + int(row.upstream_ms * 1e6)
        parent = TraceContextTextMapPropagator().extract({"traceparent": row.traceparent}) \
            if row.traceparent else None  # the agent's own trace, when it sent one
        span = self.tracer.start_span(f"context-engine {row.api}", context=parent, kind=SpanKind.SERVER,
                                      start_time=start, attributes=attributes(row))
        with trace.use_span(span, end_on_exit=False):
            child = self.tracer.start_span("upstream", kind=SpanKind.CLIENT, start_time=sent,
                                           attributes={"http.response.status_code": row.status,
                                                       "url.path": row.path[:MAX_ATTRIBUTE_CHARS]})
        if row.error or row.status >= 500 or not row.status:
            for s in (child, span):
                s.set_status(Status(StatusCode.ERROR, row.error[:200] or f"status {row.status}"))
        child.end(end_time=end)
        span.end(end_time=end)

    def close(self) -> None:
        self.provider.shutdown()  # flushes the batch exporter


class TracedLedger:
    """Records each row in ``ledger``, then emits its span; a failing tracer is only logged."""

    def __init__(self, ledger: Ledger, tracer: RequestTracer) -> None:
        self.ledger, self.tracer = ledger, tracer
        self.replica = ledger.replica  # the finisher assembles rows with it

    def record(self, row: LedgerRow) -> None:
        self.ledger.record(row)
        try:
            self.tracer.emit(row)
        except Exception:  # the edge: tracing never loses a request or its ledger row
            log.exception("emitting the request's span failed")
