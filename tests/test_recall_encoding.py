"""Compressed replies and recall: a recall call never reaches a client that did not
declare the tool, whatever the upstream's content-encoding; the header is stripped
only from a body the proxy decoded. The upstream here compresses on request
(tests/fakes/recall_upstream.py, ``x-test-encoding``), ignoring what the proxy accepts."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.fakes.recall_upstream import RecallUpstream
from tests.test_recall import TOOLS, history, recall_proxies


@pytest.fixture(scope="module")
def up():
    with RecallUpstream() as server:
        yield server


@pytest.fixture
def proxy(up, tmp_path):
    with recall_proxies(up.url, tmp_path) as start:
        yield start


def _post(p, headers: dict[str, str], stream: bool = False, model: str = "recall-id") -> httpx.Response:
    return httpx.post(p.url + "/v1/chat/completions",
                      headers={"authorization": "Bearer k", **headers},
                      json={"model": model, "messages": history(), "tools": TOOLS,
                            "stream": stream}, timeout=30)


def test_with_the_tool_offered_the_proxy_asks_for_gzip_or_identity(proxy, up):
    p = proxy()
    before = len(up.accepted)
    _post(p, {"accept-encoding": "br, zstd"})
    _post(p, {"accept-encoding": "br, zstd"}, stream=True)
    asked = up.accepted[before:]
    assert asked[:2] == ["gzip", "gzip"]  # the reply and its follow-up
    assert asked[2:] == ["identity", "identity"]


def test_a_raw_deflate_reply_is_read_and_its_recall_call_answered(proxy, up):
    r = _post(proxy(), {"x-test-encoding": "deflate"})
    assert r.status_code == 200
    assert b"context_recall" not in r.content
    assert r.json()["choices"][0]["message"]["content"].startswith("I read: ")


def test_a_reply_in_an_encoding_the_proxy_cannot_read_is_refused_not_relayed(proxy, up):
    r = _post(proxy(), {"x-test-encoding": "br"})
    assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_broken"


def test_a_gzip_stream_is_read_and_its_recall_call_answered(proxy, up):
    r = _post(proxy(), {"x-test-encoding": "gzip"}, stream=True)
    assert r.status_code == 200 and "content-encoding" not in r.headers
    assert b"context_recall" not in r.content and b"I read: " in r.content


def test_a_follow_up_the_proxy_did_not_decode_keeps_its_content_encoding(proxy, up):
    r = _post(proxy(), {"x-test-encoding-follow": "br"}, model="recall-fail")
    assert r.status_code == 500  # the follow-up's error, relayed as sent
    assert r.headers.get("content-encoding") == "br"
    assert json.loads(_raw_inflate(r.content))["error"]["message"] == "boom"


def _raw_inflate(data: bytes) -> bytes:
    import zlib

    return zlib.decompress(data, -15)
