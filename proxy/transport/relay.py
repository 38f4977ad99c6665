"""Relay an upstream response to the client: status, headers and raw bytes as sent.

``relay`` returns an ASGI response. Non-streamed bodies are read whole and sent with
their length; streamed ones (SSE, or anything when ``buffer`` is false) go out chunk
by chunk as they arrive. ``on_done`` runs once the body has been sent or the transfer
broke, with what the usage tap saw, the error (``""`` when none) and the status the
client got; it must only schedule work (the ledger row, shadow rewrites, context
metrics), never block.

Faults stay faults. A body that breaks before anything was sent answers 502 (504 on a
read timeout) in the request's dialect's error shape. A stream that breaks
mid-way is aborted: the server drops the connection without the terminating chunk, so
the client's SDK raises instead of acting on half an answer. A client that hangs up mid-stream closes the
upstream stream at once; its row says ``client_disconnected``.

An SSE stream's small chunks go out in batches (``batching``): the events that arrived
within ``coalesce_s`` (``stream_coalesce_ms``) in one write, at most that much later, byte
for byte.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing

import anyio
import httpx
from starlette.background import BackgroundTask
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from context_engine.proxy.dialects.dialect import Dialect
from context_engine.proxy.dialects.usage import Usage
from context_engine.proxy.errors import (
    ProxyError,
    StreamAborted,
    UpstreamBroken,
    UpstreamTimeout,
    error_response,
)
from context_engine.proxy.transport.batching import batches
from context_engine.proxy.transport.error_text import error_text
from context_engine.proxy.transport.upstream import response_headers
from context_engine.proxy.transport.usage_tap import UsageTap

log = logging.getLogger("context_engine.relay")

Done = Callable[[Usage, float, str, int], None]
CLIENT_DISCONNECTED = "client_disconnected"
COALESCE_BELOW = 16 * 1024  # bytes; a bigger batch is a bulk transfer, read on at once


def _is_sse(r: httpx.Response) -> bool:
    return str(r.headers.get("content-type", "")).lower().startswith("text/event-stream")


def fault(exc: httpx.HTTPError, where: str) -> ProxyError:
    message = f"upstream broke {where}: {type(exc).__name__}"
    if isinstance(exc, httpx.TimeoutException):
        return UpstreamTimeout(message)
    return UpstreamBroken(message)


async def relay(r: httpx.Response, started: float, extra_headers: list[tuple[bytes, bytes]],
                on_done: Done | None, buffer: bool, dialect: Dialect,
                coalesce_s: float = 0.0) -> Response:
    """Turn the upstream response into the client's response; ``dialect`` reads its usage
    and shapes a fault before the body was sent."""
    stream = _is_sse(r)
    tap = UsageTap(dialect, r.headers.get("content-encoding", ""), stream=stream) if on_done else None
    headers = response_headers(r.headers.raw) + extra_headers
    if not buffer or stream:
        return StreamRelay(r, headers, tap, started, on_done, coalesce_s if stream else 0.0)
    try:
        body = b"".join([chunk async for chunk in r.aiter_raw()])
    except httpx.HTTPError as exc:
        problem = fault(exc, "mid-body")
        log.warning(problem.message)
        if on_done is not None:
            on_done(Usage(), (time.perf_counter() - started) * 1000, problem.message, problem.status)
        return error_response(problem, dialect.error_body)
    finally:
        await r.aclose()
    background = None
    if tap is not None and on_done is not None:
        tap.feed(body)
        background = BackgroundTask(_call_soon, on_done, tap.close(),
                                    (time.perf_counter() - started) * 1000,
                                    error_text(body, r.status_code), r.status_code)
    if not any(k == b"content-length" for k, _ in headers):
        headers.append((b"content-length", str(len(body)).encode()))
    response = Response(content=body, status_code=r.status_code, background=background)
    response.raw_headers = headers
    return response


class StreamRelay(Response):
    """Streams the upstream body; aborts on an upstream fault, stops on a client hang-up."""

    def __init__(self, r: httpx.Response, headers: list[tuple[bytes, bytes]],
                 tap: UsageTap | None, started: float, on_done: Done | None,
                 coalesce_s: float = 0.0) -> None:
        self.r, self.tap, self.started, self.on_done = r, tap, started, on_done
        self.coalesce_s = coalesce_s
        self.status_code = r.status_code
        self.raw_headers = headers
        self.background = None

    async def _body(self, send: Send) -> str:
        """Send the body; the error that stops the stream early (``""``: none)."""
        chunks: AsyncGenerator[bytes, None] = self.r.aiter_raw()  # type: ignore[assignment]
        if self.coalesce_s:
            chunks = batches(chunks, self.coalesce_s, COALESCE_BELOW)
        async with aclosing(chunks):
            async for chunk in chunks:
                if self.tap is not None:
                    self.tap.feed(chunk)
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        return ""

    def _usage(self) -> Usage | None:
        return self.tap.close() if self.tap is not None else None

    def _ended(self) -> bool:
        """Whether the stream's end event reached the client."""
        return self.tap is not None and self.tap.ended

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        error, client_left, finished = "", False, False

        async def watch(scope_: anyio.CancelScope) -> None:
            nonlocal client_left
            while (await receive())["type"] != "http.disconnect":
                pass
            if not finished:
                client_left = True
                scope_.cancel()

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(watch, tg.cancel_scope)
                try:
                    await send({"type": "http.response.start", "status": self.status_code,
                                "headers": self.raw_headers})
                    error = await self._body(send)
                    if not error:
                        finished = True
                        await send({"type": "http.response.body", "body": b"", "more_body": False})
                except httpx.HTTPError as exc:
                    error = fault(exc, "mid-stream").message
                    log.warning(error)
                except OSError:  # ASGI 2.4 servers raise on a send to a gone client
                    client_left = True
                finally:
                    with anyio.CancelScope(shield=True):
                        await self.r.aclose()
                    tg.cancel_scope.cancel()
        finally:
            # a client that closes once the stream's end event reached it (an SDK stops
            # reading at [DONE]) had the whole answer, whenever the upstream closes
            if client_left and not error and not self._ended():
                error = CLIENT_DISCONNECTED
            usage = self._usage() if self.on_done is not None else None
            if self.on_done is not None and usage is not None:
                self.on_done(usage, (time.perf_counter() - self.started) * 1000,
                             error, self.status_code)
        if error and not client_left:
            raise StreamAborted(error)


class QuietAborts(logging.Filter):
    """Drops the server's traceback for a ``StreamAborted`` (the relay logged it already)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], StreamAborted))


def quiet_server_aborts(logger: str = "uvicorn.error") -> None:
    target = logging.getLogger(logger)
    if not any(isinstance(f, QuietAborts) for f in target.filters):
        target.addFilter(QuietAborts())


async def _call_soon(on_done: Done, usage: Usage, ms: float, error: str, status: int) -> None:
    """Run ``on_done`` on the event loop (a sync background task would run in a thread)."""
    on_done(usage, ms, error, status)
