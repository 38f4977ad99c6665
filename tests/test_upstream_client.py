"""The upstream client (``context_engine.proxy.transport.upstream.Upstream``) on
``httpx.MockTransport``: what it sends, what it maps a transport fault to, and that it
never retries or follows a redirect. A real server adds nothing to these (the real
loopback path is in test_chat_proxy.py, test_errors.py and test_stream_faults.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from context_engine.proxy.errors import ProxyError, UpstreamTimeout, UpstreamUnreachable
from context_engine.proxy.transport.upstream import BadPath, Upstream, request_headers

BASE = "http://upstream.test/api/v1"
Handler = Callable[[httpx.Request], httpx.Response]


def scope(path: str, query: bytes = b"") -> dict[str, Any]:
    return {"raw_path": path.encode("latin-1"), "path": path, "query_string": query}


def exchange(handler: Handler, path: str = "/v1/chat/completions", query: bytes = b"",
             headers: list[tuple[bytes, bytes]] | None = None,
             body: bytes = b'{"model": "m"}') -> tuple[list[httpx.Request], httpx.Response]:
    """One request through an Upstream whose transport is ``handler``; the requests the
    transport saw, and the response with its body read."""
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return handler(request)

    async def go() -> httpx.Response:
        upstream = Upstream(BASE, 5.0, 1.0, transport=httpx.MockTransport(record))
        try:
            response = await upstream.send("POST", upstream.url_for(scope(path, query)),
                                           headers or [], body)
            await response.aread()
            return response
        finally:
            await upstream.aclose()

    return seen, asyncio.run(go())


def fails(exc: Exception) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc
    return handler


def test_the_request_goes_out_as_the_client_sent_it() -> None:
    raw = [(b"Authorization", b"Bearer sk-x"), (b"Content-Type", b"application/json"),
           (b"X-Custom", b"kept"), (b"Host", b"proxy.local"), (b"Connection", b"Upgrade"),
           (b"Upgrade", b"websocket"), (b"Keep-Alive", b"timeout=5"),
           (b"Content-Length", b"14"), (b"Transfer-Encoding", b"chunked")]
    body = b'{"model":  "m" }'
    seen, response = exchange(lambda r: httpx.Response(200, content=b"ok"),
                              headers=request_headers(raw), body=body)
    (sent,) = seen
    assert sent.method == "POST" and sent.content == body
    assert str(sent.url) == "http://upstream.test/api/v1/chat/completions"
    names = [k.decode().lower() for k, _ in sent.headers.raw]
    assert sent.headers["authorization"] == "Bearer sk-x" and sent.headers["x-custom"] == "kept"
    # the client's hop-by-hop headers stay on its own connection (httpx may name its own)
    assert sent.headers.get("connection") in (None, "keep-alive")
    for hop in ("transfer-encoding", "upgrade", "keep-alive"):
        assert hop not in names
    assert sent.headers["host"] == "upstream.test"  # the new connection's, not the client's
    assert sent.headers["content-length"] == str(len(body))
    for added in ("user-agent", "accept", "accept-encoding"):  # httpx's defaults stay out
        assert added not in names
    assert response.status_code == 200 and response.content == b"ok"


def test_the_clients_own_default_headers_are_forwarded() -> None:
    headers = [(b"user-agent", b"OpenAI/Python 1.0"), (b"accept", b"text/event-stream")]
    seen, _ = exchange(lambda r: httpx.Response(200), headers=headers)
    assert seen[0].headers["user-agent"] == "OpenAI/Python 1.0"
    assert seen[0].headers["accept"] == "text/event-stream"


def test_path_and_query_keep_their_encoding() -> None:
    seen, _ = exchange(lambda r: httpx.Response(200), path="/v1/files/a%20b:c",
                       query=b"purpose=fine%2Dtune&x=%C3%A9")
    assert seen[0].url.raw_path == b"/api/v1/files/a%20b:c?purpose=fine%2Dtune&x=%C3%A9"
    seen, _ = exchange(lambda r: httpx.Response(200), path="/models")
    assert seen[0].url.raw_path == b"/api/v1/models"  # /x and /v1/x name the same place


@pytest.mark.parametrize("path", ["/v1/../secrets", "/v1/%2e%2e/secrets", "/v1/a%2fb",
                                  "/v1/x%3Fy", "v1/no-slash"])
def test_a_path_that_could_leave_the_base_is_refused_before_sending(path: str) -> None:
    with pytest.raises(BadPath) as err:
        exchange(lambda r: httpx.Response(200), path=path)
    assert err.value.status == 400


@pytest.mark.parametrize(("exc", "expected", "status"), [
    (httpx.ConnectTimeout("slow"), UpstreamTimeout, 504),
    (httpx.ReadTimeout("slow"), UpstreamTimeout, 504),
    (httpx.PoolTimeout("full"), UpstreamTimeout, 504),
    (httpx.ConnectError("refused"), UpstreamUnreachable, 502),
    (httpx.RemoteProtocolError("garbage"), UpstreamUnreachable, 502),
    (httpx.ReadError("reset"), UpstreamUnreachable, 502),
], ids=lambda v: type(v).__name__ if isinstance(v, Exception) else str(v))
def test_a_transport_fault_becomes_a_clear_upstream_error_and_is_not_retried(
        exc: Exception, expected: type[ProxyError], status: int) -> None:
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        raise exc

    with pytest.raises(expected) as err:
        exchange(handler)
    assert err.value.status == status and len(calls) == 1
    if expected is UpstreamUnreachable:
        assert type(exc).__name__ in str(err.value)
    assert "refused" not in str(err.value) and "garbage" not in str(err.value)  # no internals


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_comes_back_as_sent_and_is_not_followed(status: int) -> None:
    seen, response = exchange(lambda r: httpx.Response(
        status, headers={"location": "http://elsewhere.test/steal"}, content=b"moved"))
    assert len(seen) == 1
    assert response.status_code == status
    assert response.headers["location"] == "http://elsewhere.test/steal"
    assert response.content == b"moved"


@pytest.mark.parametrize("status", [400, 401, 429, 500, 503])
def test_an_upstream_error_status_is_a_response_not_an_exception(status: int) -> None:
    body = b'{"error": {"message": "nope", "type": "x"}}'
    seen, response = exchange(lambda r: httpx.Response(
        status, headers={"retry-after": "3"}, content=body))
    assert len(seen) == 1  # never retried, whatever the status
    assert (response.status_code, response.content) == (status, body)
    assert response.headers["retry-after"] == "3"
