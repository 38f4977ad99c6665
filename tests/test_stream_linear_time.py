"""A streamed reply costs the proxy time proportional to its length, per delta O(1).

The stream readers on the event loop (the usage tap, the SSE splitter, each recall
wire's reader) are fed n and 4n one-character deltas; the check is the rules' one
(``tests/rules/test_linear_time.py``): best CPU time at 4n within 8× that at n.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from context_engine.proxy.dialects.anthropic import recall as wire_anthropic
from context_engine.proxy.dialects.chat import CHAT
from context_engine.proxy.dialects.chat.recall import Reply
from context_engine.proxy.dialects.responses import recall as wire_responses
from context_engine.proxy.transport.sse import sse_events
from context_engine.proxy.transport.usage_tap import UsageTap
from tests.rules.test_linear_time import grows_linearly

pytestmark = pytest.mark.slow  # timed per size

N = 5000


def chat_event(delta: dict[str, Any]) -> bytes:
    data = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    return b"data: " + json.dumps(data).encode() + b"\n\n"


def anthropic_events(n: int, kind: str) -> list[dict[str, Any]]:
    start = {"type": "content_block_start", "index": 0, "content_block": (
        {"type": "text", "text": ""} if kind == "text_delta" else
        {"type": "tool_use", "id": "t", "name": "other", "input": {}})}
    field = "text" if kind == "text_delta" else "partial_json"
    return [start] + [{"type": "content_block_delta", "index": 0,
                       "delta": {"type": kind, field: "x"}} for _ in range(n)]


def tap_feeds(n: int) -> None:
    tap = UsageTap(CHAT, stream=True)
    for _ in range(n):
        tap.feed(chat_event({"content": "x"}))
    tap.close()


def tap_feeds_one_long_line(n: int) -> None:
    """One event split over n chunks (a long line arriving in pieces)."""
    tap = UsageTap(CHAT, stream=True)
    event = chat_event({"content": "x" * n})
    for i in range(0, len(event), 20):
        tap.feed(event[i:i + 20])
    tap.close()


def splitter_reads(n: int) -> None:
    body = b"".join(chat_event({"content": "x"}) for _ in range(n))

    async def run() -> None:
        async def chunks() -> Any:
            yield body  # every event in one chunk

        r = httpx.Response(200, content=chunks())
        assert sum([1 async for _ in sse_events(r)]) == n

    asyncio.run(run())


def chat_reader(n: int) -> None:
    reply = Reply()
    reply.take({"choices": [{"delta": {"tool_calls": [
        {"index": 0, "id": "c", "function": {"name": "other", "arguments": ""}}]}}]})
    for _ in range(n):
        reply.take({"choices": [{"delta": {"content": "x"}}]})
        reply.take({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "x"}}]}}]})
    reply.turn()


def anthropic_reader(kind: str) -> Callable[[int], None]:
    def run(n: int) -> None:
        reader = wire_anthropic.Reader()
        for obj in anthropic_events(n, kind):
            reader.take(obj)
        reader.turn()
    return run


def responses_reader(n: int) -> None:
    reader = wire_responses.Reader()
    for i in range(n):
        reader.take({"type": "response.output_text.delta", "output_index": 0, "delta": "x",
                     "sequence_number": i})
    reader.turn()


READERS: dict[str, Callable[[int], None]] = {
    "usage tap, one delta per chunk": tap_feeds,
    "usage tap, one long line in many chunks": tap_feeds_one_long_line,
    "SSE splitter, many events in one chunk": splitter_reads,
    "chat reader, text and tool arguments": chat_reader,
    "anthropic reader, text": anthropic_reader("text_delta"),
    "anthropic reader, tool input": anthropic_reader("input_json_delta"),
    "responses reader, text": responses_reader,
}


@pytest.mark.parametrize("name", list(READERS))
def test_stream_readers_take_linear_time_in_the_number_of_deltas(name):
    ok, detail = grows_linearly(READERS[name], N, slack=0.05)
    assert ok, f"{name}: {detail}"
