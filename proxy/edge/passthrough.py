"""Every other request under a dialect's ``passthrough`` prefixes (models, embeddings,
files, ``messages/count_tokens``, ``messages/batches``, Gemini's ``countTokens``, …),
forwarded unchanged. The proxy's own errors (a bad path, the upstream unreachable or
timing out) answer in the shape of the client's API (``registry.for_client``)."""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import Response

from context_engine.proxy.dialects.registry import for_client
from context_engine.proxy.errors import ProxyError, error_response
from context_engine.proxy.transport.relay import relay
from context_engine.proxy.transport.upstream import Upstream, kept_here, request_headers


class Passthrough:
    def __init__(self, upstream: Upstream, coalesce_s: float = 0.0) -> None:
        self.upstream, self.coalesce_s = upstream, coalesce_s

    async def handle(self, request: Request) -> Response:
        dialect = for_client(request.url.path, request.headers)
        try:
            url = self.upstream.url_for(request.scope, dialect.versioned_paths)
        except ProxyError as exc:
            return error_response(exc, dialect.error_body)
        has_body = request.method not in ("GET", "HEAD", "OPTIONS", "DELETE") or (
            "content-length" in request.headers or "transfer-encoding" in request.headers)
        body = request.stream() if has_body else b""
        started = time.perf_counter()
        try:
            r = await self.upstream.send(request.method, url,
                                         request_headers(request.headers.raw, kept_here(request.scope)), body)
        except ProxyError as exc:
            return error_response(exc, dialect.error_body)
        return await relay(r, started, [], None, buffer=False, dialect=dialect,
                           coalesce_s=self.coalesce_s)
