"""``POST /v1/chat/completions``: read, validate, rewrite, forward, relay, record.

Fail open at run time: any problem in the rewrite sends the client's original bytes.
Errors of the proxy's own (bad body, upstream unreachable) answer in OpenAI's error
shape; upstream errors pass through untouched.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from proxy.body import ParsedBody, parse_body, splice
from proxy.engine import Engine, Rewrite
from proxy.errors import BodyTooLarge, ProxyError
from proxy.ledger import Ledger, LedgerRow
from proxy.relay import relay
from proxy.session import session_id
from proxy.upstream import Upstream, request_headers
from proxy.usage_tap import Usage

log = logging.getLogger("context_engine.chat")


def error_response(exc: ProxyError) -> Response:
    return Response(exc.body(), status_code=exc.status, media_type="application/json")


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"The request body is larger than the limit of {limit} bytes.")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"The request body is larger than the limit of {limit} bytes.")
        chunks.append(chunk)
    return b"".join(chunks)


class ChatCompletions:
    def __init__(self, engine: Engine, upstream: Upstream, ledger: Ledger | None) -> None:
        self.engine = engine
        self.upstream = upstream
        self.ledger = ledger
        self.limit = engine.settings.max_body_bytes
        self.mode = engine.settings.mode

    async def handle(self, request: Request) -> Response:
        t0 = time.perf_counter()
        try:
            raw = await read_body(request, self.limit)
            body = parse_body(raw)
        except ProxyError as exc:
            return error_response(exc)
        sid = session_id(request.headers, body.data["messages"])
        rewrite = await self._rewrite(body, sid)
        out = raw if rewrite is None or not rewrite.result.changed else splice(
            body, rewrite.result.ctx.messages)
        proxy_ms = (time.perf_counter() - t0) * 1000
        row = self._row(body, sid, rewrite, proxy_ms, request.url.path)
        started = time.perf_counter()
        try:
            r = await self.upstream.send("POST", request.url.path, request.url.query,
                                         request_headers(request.headers.raw), out)
        except ProxyError as exc:
            row.status, row.error = exc.status, exc.message
            row.upstream_ms = (time.perf_counter() - started) * 1000
            self._record(row)
            return error_response(exc)
        row.status = r.status_code

        def done(usage: Usage, upstream_ms: float, error: str) -> None:
            row.prompt_tokens, row.cached_tokens = usage.prompt_tokens, usage.cached_tokens
            row.completion_tokens, row.finish_reason = usage.completion_tokens, usage.finish_reason
            row.upstream_ms, row.error = upstream_ms, error
            self._record(row)

        extra = [(b"x-context-engine-tokens-before", str(row.tokens_original).encode()),
                 (b"x-context-engine-tokens-after", str(row.tokens_sent).encode())]
        return await relay(r, started, extra, done, buffer=True)

    async def _rewrite(self, body: ParsedBody, sid: str) -> Rewrite | None:
        try:
            return await self.engine.rewrite(body.data, sid)
        except Exception:  # the edge: a broken engine never breaks a request
            log.exception("rewrite failed; forwarding the original request")
            self.engine.stats.invariant_failures += 1
            return None

    def _row(self, body: ParsedBody, sid: str, rewrite: Rewrite | None, proxy_ms: float,
             path: str) -> LedgerRow:
        row = LedgerRow(session=sid, model=str(body.data.get("model") or ""), mode=self.mode,
                        path=path, proxy_ms=proxy_ms, stream=body.data.get("stream") is True)
        if rewrite is None:
            row.failed_open = True
            return row
        res = rewrite.result
        row.encoding, row.encoding_fallback = rewrite.encoding, rewrite.encoding_fallback
        row.tokens_original, row.tokens_sent = res.tokens_before, res.tokens_after
        row.failed_open = res.failed_open
        row.rule_errors = sum(1 for j in res.journal if j.error)
        if not res.failed_open:
            row.rule_savings = {j.rule: j.saved for j in res.journal}
        row.journal = [_entry(j) for j in res.journal]
        return row

    def _record(self, row: LedgerRow) -> None:
        if self.ledger is not None:
            self.ledger.record(row)


def _entry(j: Any) -> dict[str, Any]:
    return {"rule": j.rule, "before": j.tokens_before, "after": j.tokens_after,
            "ms": round(j.ms, 3), "note": j.note, "error": j.error}
