"""``POST /v1/chat/completions``: read, validate, rewrite, forward, relay, record.

Fail open at run time: any problem in the rewrite sends the client's original bytes.
Errors of the proxy's own (bad body, upstream unreachable) answer in OpenAI's error
shape; upstream errors pass through untouched.
"""

from __future__ import annotations

import logging
import time

from starlette.requests import Request
from starlette.responses import Response

from proxy import modes
from proxy.body import ParsedBody, parse_body, splice
from proxy.engine import Engine, Rewrite
from proxy.errors import BodyTooLarge, ProxyError, error_response
from proxy.finish import Finisher, fill_from_rewrite
from proxy.ledger import LedgerRow
from proxy.relay import relay
from proxy.session import session_id, session_key
from proxy.upstream import Upstream, request_headers
from proxy.usage_tap import Usage

log = logging.getLogger("context_engine.chat")


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
    def __init__(self, engine: Engine, upstream: Upstream, finisher: Finisher) -> None:
        self.engine = engine
        self.upstream = upstream
        self.finisher = finisher
        self.settings = engine.settings
        self.session_key = session_key(self.settings.session_key, self.settings.store)

    async def handle(self, request: Request) -> Response:
        t0 = time.perf_counter()
        try:
            url = self.upstream.url_for(request.scope)
            raw = await read_body(request, self.settings.max_body_bytes)
            body = parse_body(raw)
            mode = modes.resolve(request.headers, self.settings.mode)
        except ProxyError as exc:
            return error_response(exc)
        self.finisher.begin()
        try:
            row, rewrite, out = await self._prepare(request, body, raw, mode)
        except Exception:  # the edge: whatever breaks before sending, the original goes out
            log.exception("preparing the request failed; forwarding the original request")
            self.engine.stats.invariant_failures += 1
            row, rewrite, out = LedgerRow(session="-", model=_text(body.data.get("model")),
                                          mode=mode, arm="passthrough", path=request.url.path,
                                          failed_open=True), None, raw
        arm = row.arm
        row.proxy_ms = (time.perf_counter() - t0) * 1000
        started = time.perf_counter()
        try:
            r = await self.upstream.send("POST", url, request_headers(request.headers.raw), out)
        except ProxyError as exc:
            row.status, row.error = exc.status, exc.message
            row.upstream_ms = (time.perf_counter() - started) * 1000
            self.finisher.schedule(row, body.data, rewrite, Usage(), shadow=False)
            return error_response(exc)
        row.status = r.status_code

        def done(usage: Usage, upstream_ms: float, error: str, status: int) -> None:
            row.status = status
            row.prompt_tokens, row.cached_tokens = usage.prompt_tokens, usage.cached_tokens
            row.completion_tokens, row.finish_reason = usage.completion_tokens, usage.finish_reason
            row.upstream_ms, row.error = upstream_ms, error
            self.finisher.schedule(row, body.data, rewrite, usage,
                                   shadow=arm == "shadow" and body.rewritable)

        extra = [(b"x-context-engine-tokens-before", str(row.tokens_original).encode()),
                 (b"x-context-engine-tokens-after", str(row.tokens_sent).encode())]
        return await relay(r, started, extra, done, buffer=True)

    async def _prepare(self, request: Request, body: ParsedBody, raw: bytes,
                       mode: str) -> tuple[LedgerRow, Rewrite | None, bytes]:
        """The ledger row, the rewrite (rewrite arm only) and the bytes to send upstream."""
        sid = session_id(request.headers, body.data["messages"], self.session_key)
        arm = modes.arm(mode, sid, self.settings.ab_share)
        row = LedgerRow(session=sid, model=_text(body.data.get("model")), mode=mode, arm=arm,
                        path=request.url.path, stream=body.data.get("stream") is True)
        rewrite = None
        if arm == "rewrite" and body.rewritable:
            rewrite = await self._rewrite(body, sid)
            fill_from_rewrite(row, rewrite)
        else:  # shadow/ab-control arms, and bodies the rules cannot handle (lone surrogates)
            row.tokens_original = row.tokens_sent = self.engine.count(body.data)
        out = raw if rewrite is None or not rewrite.result.changed else splice(
            body, rewrite.result.ctx.messages)
        return row, rewrite, out

    async def _rewrite(self, body: ParsedBody, sid: str) -> Rewrite | None:
        try:
            return await self.engine.rewrite_off_loop(body.data, sid)
        except Exception:  # the edge: a broken engine never breaks a request
            log.exception("rewrite failed; forwarding the original request")
            self.engine.stats.invariant_failures += 1
            return None


def _text(value: object) -> str:
    """A string for the ledger: never a lone surrogate (SQLite cannot store one)."""
    return str(value or "").encode("utf-8", "replace").decode("utf-8")
