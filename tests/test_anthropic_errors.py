"""The proxy's own errors on Anthropic's routes come in Anthropic's shape, through the
real server and the real anthropic SDK (which then raises its own class); OpenAI's
routes keep OpenAI's shape."""

from __future__ import annotations

import socket
from typing import Any

import anthropic
import httpx
import pytest

from tests.fakes import raw_upstream

MSGS: list[Any] = [{"role": "user", "content": "hi"}]
VERSION = {"anthropic-version": "2023-06-01"}


def _client(proxy) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=proxy.url, api_key="sk-ant-test", max_retries=0)


def _anthropic_error(body: object, kind: str) -> str:
    assert isinstance(body, dict) and set(body) == {"type", "error"} and body["type"] == "error"
    assert body["error"]["type"] == kind and isinstance(body["error"]["message"], str)
    return body["error"]["message"]


def _openai_error(r: httpx.Response, code: str) -> None:
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"] == code


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_upstream_answers_502_api_error_on_every_anthropic_route(start_proxy, closed_port):
    proxy = start_proxy(upstream=f"http://127.0.0.1:{closed_port}/v1")
    c = _client(proxy)
    calls = [lambda: c.messages.create(model="claude-sonnet-4-5", max_tokens=8, messages=MSGS),
             lambda: c.messages.count_tokens(model="claude-sonnet-4-5", messages=MSGS),
             lambda: c.messages.batches.list(),
             lambda: c.models.list()]
    for call in calls:
        with pytest.raises(anthropic.InternalServerError) as info:
            call()
        assert info.value.status_code == 502
        assert "upstream" in _anthropic_error(info.value.body, "api_error").lower()
    assert proxy.rows()[-1]["api"] == "anthropic" and proxy.rows()[-1]["status"] == 502
    # the same proxy answers OpenAI's clients in OpenAI's shape
    r = httpx.post(proxy.url + "/v1/chat/completions", json={"model": "gpt-4o", "messages": MSGS})
    assert r.status_code == 502
    _openai_error(r, "upstream_unreachable")
    for path in ("/v1/models", "/v1/responses/resp_1"):
        r = httpx.get(proxy.url + path)
        assert r.status_code == 502
        _openai_error(r, "upstream_unreachable")


def test_upstream_timeout_answers_504_timeout_error(start_proxy):
    silent = socket.socket()  # listens (the kernel completes the handshake) and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    try:
        proxy = start_proxy(upstream=f"http://127.0.0.1:{silent.getsockname()[1]}/v1",
                            upstream_timeout=0.3)
        c = _client(proxy)
        for call in (lambda: c.messages.create(model="claude-sonnet-4-5", max_tokens=8, messages=MSGS),
                     lambda: c.messages.count_tokens(model="claude-sonnet-4-5", messages=MSGS)):
            with pytest.raises(anthropic.GatewayTimeoutError) as info:
                call()
            _anthropic_error(info.value.body, "timeout_error")
    finally:
        silent.close()


def test_body_cut_before_it_was_sent_answers_502_in_anthropic_shape(start_proxy):
    server = raw_upstream.start()
    try:
        proxy = start_proxy(upstream=server.url + "/v1")
        with pytest.raises(anthropic.InternalServerError) as info:
            _client(proxy).messages.create(model="cut-body", max_tokens=8, messages=MSGS)
        assert "mid-body" in _anthropic_error(info.value.body, "api_error")
        r = httpx.post(proxy.url + "/v1/chat/completions", json={"model": "cut-body", "messages": MSGS})
        assert r.status_code == 502
        _openai_error(r, "upstream_broken")
    finally:
        server.close()


def test_bad_paths_and_unknown_routes_answer_in_the_clients_shape(start_proxy, mock):
    proxy = start_proxy()
    before = len(mock.received)
    r = httpx.post(proxy.url + "/v1/messages/%2e%2e/%2e%2e/admin", json={}, headers=VERSION)
    assert r.status_code == 400
    _anthropic_error(r.json(), "invalid_request_error")
    r = httpx.post(proxy.url + "/v1/messages/%2e%2e/%2e%2e/admin", json={})
    assert r.status_code == 400
    _anthropic_error(r.json(), "invalid_request_error")  # the path says Anthropic
    r = httpx.get(proxy.url + "/v1/%2e%2e/admin")
    assert r.status_code == 400 and "error" in r.json() and "type" not in r.json()
    assert len(mock.received) == before
    r = httpx.post(proxy.url + "/messages", json={}, headers=VERSION)
    assert r.status_code == 404
    _anthropic_error(r.json(), "not_found_error")
    r = httpx.get(proxy.url + "/responses")
    assert r.status_code == 405
    _openai_error(r, "method_not_allowed")
    r = httpx.get(proxy.url + "/responses", headers=VERSION)
    _anthropic_error(r.json(), "invalid_request_error")
    r = httpx.get(proxy.url + "/nope")
    assert r.status_code == 404
    _openai_error(r, "not_found")


def test_bad_bodies_and_oversized_bodies_raise_the_sdks_own_classes(start_proxy, mock):
    proxy = start_proxy(max_body_bytes=2000)
    c = _client(proxy)
    with pytest.raises(anthropic.ContentTooLargeError) as info:
        c.messages.create(model="claude-sonnet-4-5", max_tokens=8,
                          messages=[{"role": "user", "content": "x" * 3000}])
    _anthropic_error(info.value.body, "request_too_large")
    with pytest.raises(anthropic.BadRequestError) as bad:
        c.messages.create(model="claude-sonnet-4-5", max_tokens=8, messages=MSGS,
                          extra_headers={"x-context-engine-rules": "no-such-profile"})
    _anthropic_error(bad.value.body, "invalid_request_error")
    r = httpx.post(proxy.url + "/v1/messages", content=b'{"messages": [1]', headers=VERSION)
    assert r.status_code == 400
    assert "JSON" in _anthropic_error(r.json(), "invalid_request_error")


def test_host_check_answers_anthropic_clients_in_their_shape(start_proxy):
    proxy = start_proxy()
    r = httpx.post(proxy.url + "/v1/messages", json={}, headers={**VERSION, "host": "evil.example"})
    assert r.status_code == 400
    _anthropic_error(r.json(), "invalid_request_error")
    r = httpx.post(proxy.url + "/v1/chat/completions", json={}, headers={"host": "evil.example"})
    assert r.status_code == 400
    _openai_error(r, "invalid_host")
