"""A streamed reply with recall rounds (``recall.loop`` explains the loop).

Events go to the client as they come until the first tool-call delta; from there they
are held to the end of the reply. If the reply called ``context_recall``, the held
events are dropped, the calls resolved, and the stream continues with the follow-up's
events (its own role delta first); otherwise the held events go out unchanged. After a
recall round, the usage chunk (``stream_options.include_usage``) carries the sum over
rounds; every other byte is the upstream's. An upstream fault mid-stream, or a follow-up
that fails, aborts the stream as ``relay`` does.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from starlette.types import Send

from context_engine.proxy.edge.errors import ProxyError
from context_engine.proxy.edge.relay import Done, StreamRelay
from context_engine.proxy.edge.usage_tap import Usage, UsageTap
from context_engine.proxy.recall.loop import Recall, sum_counts

log = logging.getLogger("context_engine.recall")


async def sse_events(r: httpx.Response) -> AsyncIterator[bytes]:
    """The body's SSE events, each with its blank-line terminator, whatever the chunking."""
    buf = b""
    async for chunk in r.aiter_raw():
        buf += chunk
        while True:
            ends = [(i, len(sep)) for sep in (b"\n\n", b"\r\n\r\n") if (i := buf.find(sep)) >= 0]
            if not ends:
                break
            i, n = min(ends)
            yield buf[:i + n]
            buf = buf[i + n:]
    if buf:
        yield buf


def event_json(event: bytes) -> dict[str, Any] | None:
    for line in event.splitlines():
        if line.startswith(b"data:"):
            payload = line[5:].strip()
            if payload[:1] != b"{":
                return None
            try:
                data = json.loads(payload)
            except ValueError:
                return None
            return data if isinstance(data, dict) else None
    return None


@dataclass
class Reply:
    """What one streamed reply said: its text, its tool calls (by index) and usage."""

    content: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    usage: dict[str, Any] | None = None

    def take(self, obj: dict[str, Any]) -> bool:
        """Read one chunk; whether it holds a tool-call delta."""
        if isinstance(obj.get("usage"), dict):
            self.usage = obj["usage"]
        choices = obj.get("choices")
        delta = choices[0].get("delta") if isinstance(choices, list) and choices and \
            isinstance(choices[0], dict) else None
        if not isinstance(delta, dict):
            return False
        if isinstance(delta.get("content"), str):
            self.content.append(delta["content"])
        calls = delta.get("tool_calls")
        for c in calls if isinstance(calls, list) else []:
            if not isinstance(c, dict):
                continue
            index = c.get("index")
            at = self.calls.setdefault(index if isinstance(index, int) else 0, {
                "id": "", "type": "function", "function": {"name": "", "arguments": ""}})
            at["id"] = str(c.get("id") or at["id"])
            fn = c.get("function")
            fn = fn if isinstance(fn, dict) else {}
            at["function"]["name"] += str(fn.get("name") or "")
            at["function"]["arguments"] += str(fn.get("arguments") or "")
        return bool(calls)

    def message(self) -> dict[str, Any]:
        return {"role": "assistant", "content": "".join(self.content) or None,
                "tool_calls": [self.calls[i] for i in sorted(self.calls)]}


class RecallStream(StreamRelay):
    def __init__(self, loop: Recall, r: httpx.Response, headers: list[tuple[bytes, bytes]],
                 started: float, on_done: Done) -> None:
        # the body may change length (a recall round): no content-length, chunked
        super().__init__(r, [(k, v) for k, v in headers if k != b"content-length"], None,
                         started, on_done)
        self.loop = loop
        self._live = False  # relaying a reply whose usage is not in ``loop.raw_usages`` yet
        self._sent_end = False  # the final reply's [DONE] went out

    def _usage(self) -> Usage:
        return self.loop.usage()

    def _ended(self) -> bool:
        return self._sent_end

    async def _body(self, send: Send) -> str:
        """Relay reply after reply; the error that stops the stream, or ``""``."""
        while True:
            reply, held = await self._relay(send)
            if not held or not self.loop.answer_calls(reply.message()):
                for event in held:
                    await self._send(send, event, event_json(event))
                return ""
            await self.r.aclose()
            try:
                self.r = await self.loop.ask_again()
            except ProxyError as exc:
                return f"recall follow-up failed: {exc.message}"
            if self.r.status_code != 200 or not self.r.headers.get(
                    "content-type", "").startswith("text/event-stream"):
                return f"recall follow-up answered {self.r.status_code}"

    async def _relay(self, send: Send) -> tuple[Reply, list[bytes]]:
        """Send one reply's events up to its first tool-call delta; hold the rest."""
        reply, held = Reply(), list[bytes]()
        tap = UsageTap(self.r.headers.get("content-encoding", ""), stream=True)
        self._live = True
        async for event in sse_events(self.r):
            tap.feed(event)
            obj = event_json(event)
            calls = reply.take(obj) if obj is not None else False
            if held or calls:
                held.append(event)
            else:
                await self._send(send, event, obj)
        self.loop.usages.append(tap.close())
        if reply.usage is not None:
            self.loop.raw_usages.append(reply.usage)
        self._live = False
        return reply, held

    async def _send(self, send: Send, event: bytes, obj: dict[str, Any] | None) -> None:
        if self.loop.rounds and obj is not None and isinstance(obj.get("usage"), dict):
            usages = self.loop.raw_usages + ([obj["usage"]] if self._live else [])
            obj = {**obj, "usage": sum_counts(obj["usage"], usages)}
            event = b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"
        await send({"type": "http.response.body", "body": event, "more_body": True})
        self._sent_end = self._sent_end or event.rstrip().endswith(b"data: [DONE]")
