"""No request leaves the upstream base: dot segments and encoding tricks answer 400.

Targets go on the wire exactly as written (http.client does not normalise them); the
upstream is a raw socket server that records the request target it received.
"""

from __future__ import annotations

import http.client
import json

import pytest

TRICKS = [
    "/v1/%2e%2e/admin/x",
    "/v1/%2E%2E/admin/x",
    "/v1/.%2e/admin/x",
    "/v1/../admin/x",
    "/v1/models/../../admin",
    "/v1/./models",
    "/v1/models/..",
    "/v1/%252e%252e/admin/x",
    "/v1/files%2f..%2fadmin",
    "/v1/files%2F..%2Fadmin",
    "/v1/files/x%5c..%5cadmin",
    "/v1/files\\..\\admin",
    "/v1/models%23/x",
    "/v1/models%3fa=1",
    "/v1/models%00",
    "/v1/chat%2fcompletions",
]


def _send(proxy, method: str, target: str, body: bytes | None = None):
    host, port = proxy.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.putrequest(method, target, skip_accept_encoding=True)
        conn.putheader("content-type", "application/json")
        conn.putheader("content-length", str(len(body or b"")))
        conn.endheaders(body)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


@pytest.mark.parametrize("target", TRICKS)
def test_path_tricks_answer_400_and_never_reach_the_upstream(start_proxy, raw, target):
    proxy = start_proxy(upstream=raw.url + "/v1")
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    for method in ("GET", "POST"):
        status, payload = _send(proxy, method, target, body if method == "POST" else None)
        assert status == 400, (method, target, status, payload)
        err = json.loads(payload)["error"]
        assert err["type"] == "invalid_request_error" and err["code"] == "invalid_path"
    assert raw.received == []


@pytest.mark.parametrize("target,upstream_target", [
    ("/v1/models", "/v1/models"),
    ("/v1/files/file-1/content", "/v1/files/file-1/content"),
    ("/v1/files/a..b.c", "/v1/files/a..b.c"),
    ("/v1/models/ft:gpt-4o:org:x", "/v1/models/ft:gpt-4o:org:x"),
    ("/v1/files/a%20b", "/v1/files/a%20b"),
    ("/v1/files/caf%C3%A9?x=1&y=%2e%2e", "/v1/files/caf%C3%A9?x=1&y=%2e%2e"),
])
def test_ordinary_paths_reach_the_upstream_as_sent(start_proxy, raw, target, upstream_target):
    proxy = start_proxy(upstream=raw.url + "/v1")
    status, _ = _send(proxy, "GET", target)
    assert status == 200
    assert raw.received[-1].target == upstream_target


def test_the_upstream_base_path_is_kept(start_proxy, raw):
    proxy = start_proxy(upstream=raw.url + "/openai/v1")
    status, _ = _send(proxy, "GET", "/v1/models")
    assert status == 200 and raw.received[-1].target == "/openai/v1/models"
    status, _ = _send(proxy, "POST", "/v1/chat/completions",
                      json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}]}).encode())
    assert status == 200 and raw.received[-1].target == "/openai/v1/chat/completions"
