"""A stream of small, fast events is relayed in batches, byte for byte.

The upstream (``raw_upstream``'s ``burst-stream``) writes 400 events a millisecond apart.
Relayed one read and one write per event, they would cost the event loop 400 turns that
other requests wait behind; the relay sends what arrived while it waited
(``stream_coalesce_ms``) in one write. The client still gets every byte, in order.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import MutableMapping
from types import SimpleNamespace
from typing import Any

import anyio
import httpx
import pytest

from context_engine.proxy.dialects.chat import CHAT
from context_engine.proxy.transport import batching
from context_engine.proxy.transport import relay as relay_module
from context_engine.proxy.transport.batching import batches
from tests.fakes import raw_upstream

WAIT_S = 0.005
BODY = b'{"model": "burst-stream", "stream": true, "messages": [{"role": "user", "content": "hi"}]}'


async def _relay_burst(url: str) -> tuple[list[bytes], bytes]:
    """The relay's body writes and the upstream's raw body for the same stream."""
    async with httpx.AsyncClient() as client:
        direct = await client.post(url + "/v1/chat/completions", content=BODY)
        req = client.build_request("POST", url + "/v1/chat/completions", content=BODY)
        r = await client.send(req, stream=True)
        response = await relay_module.relay(r, time.perf_counter(), [], None, buffer=True,
                                            dialect=CHAT, coalesce_s=WAIT_S)
        writes: list[bytes] = []
        never = anyio.Event()

        async def receive() -> MutableMapping[str, Any]:
            await never.wait()
            return {"type": "http.disconnect"}

        async def send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.body" and message.get("body"):
                writes.append(message["body"])

        await response({"type": "http"}, receive, send)
        return writes, direct.content


def test_fast_small_events_go_out_in_few_writes_with_every_byte():
    server = raw_upstream.start()
    try:
        writes, direct = anyio.run(_relay_burst, server.url)
    finally:
        server.close()
    assert b"".join(writes) == direct
    assert direct.count(b"data: ") == raw_upstream.BURST + 1
    # 1 ms apart, sent at most every 5 ms: about 5 events a write (one each without)
    assert len(writes) <= raw_upstream.BURST // 2


async def _source(chunks: list[bytes], gap_s: float, fault: Exception | None = None):
    for chunk in chunks:
        yield chunk
        await anyio.sleep(gap_s)
    if fault is not None:
        raise fault


async def _collect(source, wait_s: float = WAIT_S) -> list[bytes]:
    return [b async for b in batches(source, wait_s, below=16 * 1024)]


def test_events_further_apart_than_the_wait_go_out_one_by_one():
    chunks = [b"data: %d\n\n" % i for i in range(6)]
    assert anyio.run(_collect, _source(chunks, 0.05)) == chunks


def test_a_fault_is_raised_after_every_chunk_read_before_it():
    out: list[bytes] = []

    async def run() -> None:
        async for b in batches(_source([b"a", b"b", b"c"], 0.0, httpx.ReadError("cut")), WAIT_S, 16):
            out.append(b)

    with pytest.raises(httpx.ReadError):
        anyio.run(run)
    assert b"".join(out) == b"abc"


def test_reading_ahead_of_a_slow_client_stops_at_the_limit():
    read: list[int] = []

    async def endless():
        for i in range(10_000):
            read.append(i)
            yield b"x" * 1024

    async def run() -> None:
        gen = batches(endless(), WAIT_S, below=16, limit=64 * 1024)
        first = await gen.__anext__()
        await anyio.sleep(0.2)  # the client reads nothing for a while
        # what the client got, 64 KB more read ahead, then the pump waits
        assert len(read) <= len(first) // 1024 + 64 + 1 < 10_000
        await gen.aclose()
        assert first

    anyio.run(run)


def _pumped(produce, source) -> list[bytes]:
    """What ``batches`` yields from ``source`` while ``produce`` feeds it."""
    async def run() -> list[bytes]:
        producer = asyncio.get_running_loop().create_task(produce())
        out = await _collect(source())
        await producer
        return out

    return anyio.run(run)


def test_after_waiting_for_a_chunk_the_reader_lets_the_next_ones_gather():
    """Each chunk the reader has to wait for is a read of the socket (a loop turn, a
    parse); after one, the reader waits ``wait_s`` so what comes meanwhile is taken at
    once. 200 chunks a millisecond apart: about one wait per 5 ms, not one per chunk."""
    waits = 0
    queue: asyncio.Queue[bytes | None] = asyncio.Queue()

    async def produce() -> None:
        for i in range(200):
            queue.put_nowait(b"data: %d\n\n" % i)
            await anyio.sleep(0.001)
        queue.put_nowait(None)

    async def source():
        nonlocal waits
        while True:
            if queue.empty():
                waits += 1
            chunk = await queue.get()
            if chunk is None:
                return
            yield chunk

    out = _pumped(produce, source)
    assert b"".join(out) == b"".join(b"data: %d\n\n" % i for i in range(200))
    assert waits <= 200 // 2


def test_an_upstream_faster_than_the_waits_is_read_on(monkeypatch):
    """A socket the reader does not read holds little (a bounded buffer here: 60 chunks,
    ~12 KB), and the upstream waits while it is full. An upstream that fills it during one
    of the reader's waits streams faster than the waits let through: the reader reads on
    instead of waiting again after each refill (it waited ~80 times for these 5,000
    chunks; a 20,000-delta stream took 10 s under uvloop)."""
    reader_waits = 0
    queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=60)
    chunks = [b"data: %04d %s\n\n" % (i, b"x" * 180) for i in range(5000)]

    async def counted_sleep(seconds: float) -> None:
        nonlocal reader_waits
        reader_waits += sys._getframe(1).f_code.co_name == "run"  # _Pump.run, not the writer
        await anyio.sleep(seconds)

    monkeypatch.setattr(batching, "anyio", SimpleNamespace(sleep=counted_sleep, CancelScope=anyio.CancelScope))

    async def produce() -> None:
        for chunk in chunks:
            await queue.put(chunk)
        await queue.put(None)

    async def source():
        while (chunk := await queue.get()) is not None:
            if queue.empty():
                await anyio.sleep(0.001)  # a read of an empty socket: a loop turn and more
            yield chunk

    assert b"".join(_pumped(produce, source)) == b"".join(chunks)
    assert reader_waits <= 2
