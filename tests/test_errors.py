"""Error paths: bad bodies answer 4xx in OpenAI's shape; upstream errors pass through."""

from __future__ import annotations

import socket

import httpx
import openai
import pytest

MSGS = [{"role": "user", "content": "hi"}]


def _error(r: httpx.Response) -> dict:
    body = r.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


@pytest.mark.parametrize("body,param", [
    (b"{not json", None),
    (b"[1, 2]", None),
    (b'{"model": "gpt-4o"}', "messages"),
    (b'{"model": "gpt-4o", "messages": []}', "messages"),
    (b'{"model": "gpt-4o", "messages": "hi"}', "messages"),
    (b'{"model": "gpt-4o", "messages": [{"content": "no role"}]}', "messages[0]"),
    (b'{"model": "gpt-4o", "messages": [{"role": "user", "content": 5}]}', "messages[0].content"),
    (b'\xff\xfe', None),
])
def test_bad_bodies_answer_400_in_openai_shape(start_proxy, mock, body, param):
    proxy = start_proxy()
    before = len(mock.received)
    r = httpx.post(proxy.url + "/v1/chat/completions", content=body)
    assert r.status_code == 400
    err = _error(r)
    assert err["type"] == "invalid_request_error" and err["param"] == param
    assert len(mock.received) == before, "a bad body must not reach the upstream"


def test_body_over_the_limit_answers_413(start_proxy):
    proxy = start_proxy(max_body_bytes=1000)
    big = {"model": "gpt-4o", "messages": [{"role": "user", "content": "x" * 2000}]}
    r = httpx.post(proxy.url + "/v1/chat/completions", json=big)
    assert r.status_code == 413 and _error(r)["code"] == "request_too_large"


def test_unknown_route_answers_404_in_openai_shape(start_proxy):
    r = httpx.get(start_proxy().url + "/nope")
    assert r.status_code == 404 and _error(r)["code"] == "not_found"


def test_upstream_429_passes_through_with_retry_after(start_proxy):
    proxy = start_proxy()
    r = httpx.post(proxy.url + "/v1/chat/completions", json={"model": "mock-429", "messages": MSGS})
    assert r.status_code == 429
    assert r.headers["retry-after"] == "7" and r.headers["x-ratelimit-remaining-requests"] == "0"
    assert r.json()["error"]["code"] == "rate_limit_exceeded"
    with pytest.raises(openai.RateLimitError):
        proxy.client().chat.completions.create(model="mock-429", messages=MSGS)


def test_proxy_never_retries(start_proxy, mock):
    proxy = start_proxy()
    before = len(mock.received)
    httpx.post(proxy.url + "/v1/chat/completions", json={"model": "mock-500", "messages": MSGS})
    assert len(mock.received) == before + 1


def test_upstream_500_passes_through(start_proxy):
    proxy = start_proxy()
    r = httpx.post(proxy.url + "/v1/chat/completions", json={"model": "mock-500", "messages": MSGS})
    assert r.status_code == 500 and r.json() == {"error": {"message": "boom", "type": "server_error",
                                                           "param": None, "code": None}}
    assert proxy.rows()[-1]["status"] == 500


def test_upstream_timeout_answers_504(start_proxy):
    proxy = start_proxy(upstream_timeout=0.3)
    r = httpx.post(proxy.url + "/v1/chat/completions", json={"model": "mock-slow-2", "messages": MSGS})
    assert r.status_code == 504 and _error(r)["code"] == "upstream_timeout"


def test_refused_connection_answers_502(start_proxy):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proxy = start_proxy(upstream=f"http://127.0.0.1:{port}/v1")
    r = httpx.post(proxy.url + "/v1/chat/completions", json={"model": "gpt-4o", "messages": MSGS})
    assert r.status_code == 502 and _error(r)["code"] == "upstream_unreachable"
    assert proxy.rows()[-1]["status"] == 502
    m = httpx.get(proxy.url + "/v1/models")
    assert m.status_code == 502
