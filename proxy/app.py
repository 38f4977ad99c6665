"""The ASGI app: routes only. Everything it wires is built once, at start-up."""

from __future__ import annotations

import contextlib
from typing import Any, AsyncIterator

import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from proxy import __version__
from proxy.chat import ChatCompletions
from proxy.engine import Engine
from proxy.ledger import Ledger
from proxy.passthrough import Passthrough
from proxy.settings import Settings
from proxy.upstream import Upstream

METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


async def http_error(request: Request, exc: Exception) -> Response:
    """404/405 of the proxy's own routes, in OpenAI's error shape."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    return JSONResponse({"error": {"message": f"{request.method} {request.url.path}: "
                                   f"{getattr(exc, 'detail', 'error')}",
                                   "type": "invalid_request_error", "param": None,
                                   "code": "not_found" if status == 404 else "method_not_allowed"}},
                        status_code=status)


def create_app(settings: Settings, engine: Engine | None = None,
               transport: httpx.AsyncBaseTransport | None = None,
               ledger: Ledger | None = None) -> Starlette:
    engine = engine or Engine(settings)
    ledger = ledger if ledger is not None else Ledger(settings.ledger)
    upstream = Upstream(settings.upstream, settings.upstream_timeout, settings.connect_timeout,
                        transport=transport)
    chat = ChatCompletions(engine, upstream, ledger)
    passthrough = Passthrough(upstream)

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({
            "status": "ok", "version": __version__, "mode": settings.mode,
            "rules": engine.pipeline.names, "upstream": settings.upstream,
            "rule_failures": dict(engine.stats.rule_failures),
            "invariant_failures": engine.stats.invariant_failures,
        })

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await upstream.aclose()
            ledger.close()

    routes = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/v1/chat/completions", chat.handle, methods=["POST"]),
        Route("/chat/completions", chat.handle, methods=["POST"]),
        Route("/v1/{path:path}", passthrough.handle, methods=METHODS),
    ]
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={HTTPException: http_error})
    app.state.engine, app.state.ledger, app.state.upstream = engine, ledger, upstream
    return app
