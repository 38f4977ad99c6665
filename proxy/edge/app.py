"""The ASGI app: routes only. Everything it wires is built once, at start-up."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sqlite3
from collections.abc import AsyncIterator
from typing import Any

import httpx
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route, WebSocketRoute

from context_engine.proxy import __version__, log_redaction
from context_engine.proxy.dialects.registry import DIALECTS, for_client
from context_engine.proxy.dialects.responses import RESPONSES
from context_engine.proxy.edge import shutdown
from context_engine.proxy.edge.conversation import Conversation
from context_engine.proxy.edge.exposure import (
    ClientTokens,
    HostCheck,
    admin_only,
    check_exposure,
    client_tokens,
    is_admin,
    is_loopback,
)
from context_engine.proxy.edge.health import health, watch
from context_engine.proxy.edge.keyless import KeylessRefusals
from context_engine.proxy.edge.origin import OriginCheck, allowed_origins
from context_engine.proxy.edge.passthrough import Passthrough
from context_engine.proxy.edge.tags import TagPrefix
from context_engine.proxy.edge.websocket import ResponsesSocket
from context_engine.proxy.engine.engine import Engine
from context_engine.proxy.errors import OwnError, error_response
from context_engine.proxy.recording.finish import Finisher
from context_engine.proxy.recording.ledger import Ledger
from context_engine.proxy.recording.metrics import Metrics
from context_engine.proxy.reporting.dashboard import dashboard_html
from context_engine.proxy.reporting.report import parse_since
from context_engine.proxy.reporting.stats import FLUSH_WAIT, stats_after_flush
from context_engine.proxy.sanitize import redact_url
from context_engine.proxy.settings import ConfigError, Settings
from context_engine.proxy.transport.intake import Intake
from context_engine.proxy.transport.relay import quiet_server_aborts
from context_engine.proxy.transport.upstream import Upstream

METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


async def http_error(request: Request, exc: Exception) -> Response:
    """404/405 of the proxy's own routes, in the error shape of the client's API."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    message = f"{request.method} {request.url.path}: {getattr(exc, 'detail', 'error')}"
    code = "not_found" if status == 404 else "method_not_allowed"
    return error_response(OwnError(status, message, "invalid_request_error", code),
                          for_client(request.url.path, request.headers).error_body)


def open_ledger(settings: Settings) -> Ledger:
    """The configured ledger, ready to write; ConfigError naming ``ledger`` if it is not."""
    replica = settings.replica or f"{socket.gethostname()}:{settings.port}"
    try:
        return Ledger(settings.ledger, settings.ledger_retention_days, replica=replica)
    except (ValueError, OSError, sqlite3.Error) as exc:
        raise ConfigError(f"ledger: {exc}") from None


def create_app(settings: Settings, engine: Engine | None = None,
               transport: httpx.AsyncBaseTransport | None = None,
               ledger: Ledger | None = None, tracer: Any = None) -> Starlette:
    """``tracer``: a ``context_engine.proxy.recording.tracing.RequestTracer`` (made from the OTEL_* variables when
    ``otel`` is on and none is given)."""
    check_exposure(settings)
    log_redaction.install()  # no log record, from any library, holds a key or a query
    ledger = ledger if ledger is not None else open_ledger(settings)
    engine = engine or Engine(settings)
    quiet_server_aborts()
    upstream = Upstream(settings.upstream, settings.upstream_timeout, settings.connect_timeout,
                        transport=transport)
    metrics = Metrics()
    if tracer is None and settings.otel:
        from context_engine.proxy.recording.tracing import make_tracer

        tracer = make_tracer()
    recorder: Any = ledger
    if tracer is not None:
        from context_engine.proxy.recording.tracing import TracedLedger

        recorder = TracedLedger(ledger, tracer)
    finisher = Finisher(engine, recorder, metrics)
    watch(metrics, ledger, engine.store, finisher)
    intake = Intake(settings.max_body_bytes, settings.max_inflight_body_bytes, settings.body_read_timeout)
    keyless = KeylessRefusals()  # one upstream: what it refuses, it refuses on every API
    conversations = [Conversation(engine, upstream, finisher, d, intake, keyless) for d in DIALECTS]
    passthrough = Passthrough(upstream, settings.stream_coalesce_ms / 1000)

    async def healthz(request: Request) -> JSONResponse:
        """Status for anyone; the details (replica, errors, counters) for the admin."""
        state = health(ledger, engine.store, finisher)
        if not is_admin(request, settings.admin_token):
            return JSONResponse({"status": state["status"]})
        return JSONResponse({
            **state, "version": __version__, "mode": settings.mode,
            "replica": ledger.replica, "texts_embedded": engine.embedded(),
            "rules": engine.pipeline.names, "upstream": redact_url(settings.upstream),
            "rule_failures": dict(engine.stats.rule_failures),
            "invariant_failures": engine.stats.invariant_failures,
            "rules_lanes": engine.lane_stats(),
        })

    async def metrics_endpoint(request: Request) -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    async def stats_endpoint(request: Request) -> Response:
        try:
            since = parse_since(request.query_params.get("since"))
        except ValueError as exc:
            return JSONResponse({"error": {"message": str(exc), "type": "invalid_request_error",
                                           "param": "since", "code": "invalid_since"}}, status_code=400)
        await finisher.drain(FLUSH_WAIT)
        where = {k: request.query_params[k] for k in ("agent", "project") if k in request.query_params}
        data = await asyncio.to_thread(stats_after_flush, ledger, since, where=where)
        return JSONResponse(data)

    async def dashboard(request: Request) -> Response:
        return HTMLResponse(dashboard_html())

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        try:
            yield
        finally:  # bounded: the process must be gone within a container's grace period
            await finisher.stop(shutdown.DRAIN_S, shutdown.CANCEL_S)
            await shutdown.flush(ledger)
            finisher.close()
            await upstream.aclose()
            shutdown.close_within(ledger.close)
            if tracer is not None:
                tracer.close()

    routes = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", admin_only(metrics_endpoint, settings.admin_token), methods=["GET"]),
        Route("/stats", admin_only(stats_endpoint, settings.admin_token), methods=["GET"]),
        Route("/dashboard", admin_only(dashboard, settings.admin_token), methods=["GET"]),
        *(Route(path, c.handle, methods=["POST"]) for c in conversations for path in c.dialect.routes),
        *(Route(path, passthrough.handle, methods=METHODS) for d in DIALECTS for path in d.passthrough),
        *(WebSocketRoute(path, ResponsesSocket(c).handle) for c in conversations  # Codex's transport
          if c.dialect is RESPONSES for path in c.dialect.routes),
    ]
    allowed = tuple(h.strip() for h in settings.allowed_hosts.split(",") if h.strip())
    middleware = [Middleware(OriginCheck, allowed=allowed_origins(settings.allowed_origins)),
                  Middleware(TagPrefix)]
    if is_loopback(settings.host):
        middleware.append(Middleware(HostCheck, allowed=allowed))
    if client_tokens(settings):
        middleware.append(Middleware(ClientTokens, tokens=client_tokens(settings)))
    app = Starlette(routes=routes, lifespan=lifespan, middleware=middleware,
                    exception_handlers={HTTPException: http_error})
    app.state.engine, app.state.ledger, app.state.upstream = engine, ledger, upstream
    app.state.tracer, app.state.intake = tracer, intake
    app.state.finisher, app.state.metrics = finisher, metrics
    return app
