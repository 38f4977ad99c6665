"""Decompressing an upstream reply is bounded (``proxy.transport.decoding``).

A loopback upstream (tests/fakes/bomb_upstream.py) answers with gzip "bombs": a few
hundred kilobytes that expand to 256 MiB, four times ``MAX_DECODED_BYTES``. Memory is
measured with ``tracemalloc`` (every thread, the proxy's included) while one request
runs: the proxy's peak stays under twice the bound, where decoding the whole reply
would need the expanded size at least.

- a reply the proxy must read (``context_recall`` offered, not streamed): a 502 in the
  client's API shape;
- a streamed reply the proxy must read: the stream is aborted, as on any upstream fault;
- a reply the proxy only reads on the side (the usage tap): the client gets the
  upstream's bytes exactly as sent, and the row is written.
"""

from __future__ import annotations

import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from context_engine.proxy.transport.decoding import MAX_DECODED_BYTES, Decoder, decoded
from tests.fakes.bomb_upstream import EXPANDED, BombUpstream, gzip_of
from tests.test_recall import TOOLS, history, recall_proxies

PEAK = 2 * MAX_DECODED_BYTES


@pytest.fixture(scope="module")
def bomb() -> Iterator[BombUpstream]:
    server = BombUpstream()
    with server:
        yield server


@pytest.fixture
def proxy(bomb, tmp_path):
    with recall_proxies(bomb.url, tmp_path) as start:
        yield start()


def peak_while(fn: Callable[[], Any]) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        return fn(), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def body(model: str, stream: bool = False, tools: bool = True) -> dict[str, Any]:
    return {"model": model, "messages": history(), "stream": stream, **({"tools": TOOLS} if tools else {})}


def test_the_bombs_expand_far_past_the_bound(bomb):
    assert EXPANDED >= 4 * MAX_DECODED_BYTES
    assert all(len(blob) < 2 * 1024 * 1024 for blob in bomb.sent.values())


def test_a_reply_read_for_recall_that_decompresses_past_the_bound_is_a_502_in_the_api_shape(proxy, bomb):
    def post() -> httpx.Response:
        return httpx.post(proxy.url + "/v1/chat/completions", json=body("bomb-json"),
                          headers={"authorization": "Bearer k"}, timeout=120)

    r, peak = peak_while(post)
    assert bomb.offered[-1], "the request offered context_recall: the proxy reads the reply"
    assert r.status_code == 502
    assert r.json()["error"]["code"] == "upstream_broken"
    assert peak < PEAK, f"peak {peak >> 20} MiB"


def test_a_streamed_reply_read_for_recall_past_the_bound_is_aborted(proxy, bomb):
    def read() -> tuple[int, int, str]:
        got, error = 0, ""
        with httpx.stream("POST", proxy.url + "/v1/chat/completions", json=body("bomb-stream", stream=True),
                          headers={"authorization": "Bearer k"}, timeout=120) as r:
            try:
                for chunk in r.iter_raw():
                    got += len(chunk)
            except httpx.HTTPError as exc:
                error = type(exc).__name__
            return r.status_code, got, error

    (status, got, error), peak = peak_while(read)
    assert bomb.offered[-1]
    assert status == 200 and error, "the stream is cut, not ended: the client's SDK raises"
    assert got < EXPANDED
    assert peak < PEAK, f"peak {peak >> 20} MiB"
    rows = proxy.rows()
    assert "upstream broke mid-stream" in rows[-1]["error"]


def test_a_reply_read_on_the_side_past_the_bound_reaches_the_client_as_sent(proxy, bomb):
    def read() -> tuple[int, bytes, str]:
        with httpx.stream("POST", proxy.url + "/v1/chat/completions", json=body("bomb-json", tools=False),
                          headers={"authorization": "Bearer k"}, timeout=120) as r:
            return r.status_code, b"".join(r.iter_raw()), r.headers.get("content-encoding", "")

    (status, raw, encoding), peak = peak_while(read)
    assert not bomb.offered[-1]
    assert status == 200 and encoding == "gzip"
    assert raw == bomb.sent["bomb-json"]
    assert peak < PEAK, f"peak {peak >> 20} MiB"
    row = proxy.rows()[-1]
    assert row["status"] == 200 and not row["error"]


def test_an_ordinary_gzip_reply_is_still_read(proxy, bomb):
    r = httpx.post(proxy.url + "/v1/chat/completions", json=body("small", tools=False),
                   headers={"authorization": "Bearer k"}, timeout=30)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "ok"
    assert proxy.rows()[-1]["completion_tokens"] == 1


@pytest.mark.parametrize("pieces", [1, 7, 4096])
def test_the_decoder_stops_at_the_bound_however_the_body_is_cut(pieces):
    blob = zlib.compress(b"a" * 300_000)
    exact, over = Decoder("deflate", limit=300_000), Decoder("deflate", limit=299_999)
    step = -(-len(blob) // pieces)
    out = b"".join(exact.feed(blob[i:i + step]) for i in range(0, len(blob), step))
    assert out == b"a" * 300_000 and exact.ok and exact.complete
    for i in range(0, len(blob), step):
        over.feed(blob[i:i + step])
    assert not over.ok and over.over and over.size <= 300_000


def test_a_whole_body_past_the_bound_is_not_decoded():
    blob = gzip_of(b"", b"\0", b"")
    assert decoded(blob, "gzip") is None
    assert decoded(zlib.compress(b"{}"), "deflate") == b"{}"
