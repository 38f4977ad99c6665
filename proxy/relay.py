"""Relay an upstream response to the client: status, headers and raw bytes as sent.

``relay`` returns a starlette response. Non-streamed bodies are read whole and sent
with their length; streamed ones (SSE, or anything when ``buffer`` is false) go out
chunk by chunk as they arrive. ``on_done`` runs once the body has been sent or the
transfer broke, with what the usage tap saw; it must only schedule work (the ledger
row, shadow rewrites, context metrics), never block.
"""

from __future__ import annotations

import logging
import time
from typing import AsyncIterator, Callable

import httpx
from starlette.background import BackgroundTask
from starlette.responses import Response, StreamingResponse

from proxy.upstream import response_headers
from proxy.usage_tap import Usage, UsageTap

log = logging.getLogger("context_engine.relay")

Done = Callable[[Usage, float, str], None]


def _is_sse(r: httpx.Response) -> bool:
    return r.headers.get("content-type", "").lower().startswith("text/event-stream")


async def relay(r: httpx.Response, started: float, extra_headers: list[tuple[bytes, bytes]],
                on_done: Done | None, buffer: bool) -> Response:
    """Turn the upstream response into the client's response."""
    stream = _is_sse(r)
    tap = UsageTap(r.headers.get("content-encoding", ""), stream=stream) if on_done else None
    headers = response_headers(r.headers.raw) + extra_headers
    if buffer and not stream:
        error = ""
        try:
            body = b"".join([chunk async for chunk in r.aiter_raw()])
        except httpx.HTTPError as exc:
            body, error = b"", f"upstream broke mid-body: {type(exc).__name__}"
        finally:
            await r.aclose()
        background = None
        if tap is not None and on_done is not None:
            tap.feed(body)
            background = BackgroundTask(_call_soon, on_done, tap.close(),
                                        (time.perf_counter() - started) * 1000, error)
        if not any(k == b"content-length" for k, _ in headers):
            headers.append((b"content-length", str(len(body)).encode()))
        response = Response(content=body, status_code=r.status_code, background=background)
        response.raw_headers = headers
        return response
    response = StreamingResponse(_chunks(r, tap, started, on_done), status_code=r.status_code)
    response.raw_headers = headers
    return response


async def _chunks(r: httpx.Response, tap: UsageTap | None, started: float,
                  on_done: Done | None) -> AsyncIterator[bytes]:
    error = ""
    try:
        async for chunk in r.aiter_raw():
            if tap is not None:
                tap.feed(chunk)
            yield chunk
    except httpx.HTTPError as exc:
        error = f"upstream broke mid-stream: {type(exc).__name__}"
        log.warning(error)
    finally:
        await r.aclose()
        if tap is not None and on_done is not None:
            on_done(tap.close(), (time.perf_counter() - started) * 1000, error)


async def _call_soon(on_done: Done, usage: Usage, ms: float, error: str) -> None:
    """Run ``on_done`` on the event loop (a sync background task would run in a thread)."""
    on_done(usage, ms, error)
