"""A streamed reply with recall rounds (``recall.loop`` explains the loop).

Events go to the client as they come until a ``context_recall`` call begins (the API's
``Reader`` says when: the call's name comes first on every API); from there they are
held to the end of the reply. Then the held events are dropped, the calls resolved, and
the stream continues with the follow-up's events, as the API's ``Continuity`` has them
(chat: as sent, the usage chunk summed; Responses and Anthropic: one response, see
their wires). The client's own tool calls before it stream as they come.

The reply is relayed instead, with its recall calls left out (``Reader.hide``: later
indices closed up, a stop reason of "tool calls" with none left becomes a plain stop),
when one of the client's calls went out before the recall call (asking again would
repeat it), when no round is left, or when the held events pass ``max_held_bytes``
(from there on the rest streams as it comes). An upstream fault mid-stream, or a
follow-up that fails, aborts the stream as ``relay`` does.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
from starlette.types import Send

from context_engine.proxy.errors import ProxyError
from context_engine.proxy.recall.loop import Recall
from context_engine.proxy.recall.wire import Reader
from context_engine.proxy.transport.relay import Done, StreamRelay
from context_engine.proxy.transport.usage_tap import Usage, UsageTap

log = logging.getLogger("context_engine.recall")
END_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed",
                        "message_stop"})


EVENT_END = re.compile(rb"\n\n|\r\n\r\n")


READABLE = frozenset({"", "identity", "gzip", "deflate"})  # httpx decodes these


def readable(encoding: str) -> bool:
    """Whether httpx decodes a body of this ``content-encoding`` (``aiter_bytes``)."""
    return all(e.strip().lower() in READABLE for e in encoding.split(","))


async def sse_events(r: httpx.Response) -> AsyncIterator[bytes]:
    """The body's SSE events, each with its blank-line terminator, whatever the chunking.
    Linear in the body: an event's chunks are joined once, when its end arrives, and each
    byte is searched once for an end."""
    pending: list[bytes] = []  # the chunks of an event whose end has not arrived
    tail = b""  # the last bytes of ``pending``: an end may begin there
    async for chunk in r.aiter_bytes():  # decoded (``readable`` encodings only)
        if not EVENT_END.search(tail + chunk):
            if chunk:
                pending.append(chunk)
                tail = (tail + chunk)[-3:]
            continue
        buf = b"".join(pending) + chunk
        start, pos = 0, max(0, len(buf) - len(chunk) - len(tail))
        while (end := EVENT_END.search(buf, pos)) is not None:
            yield buf[start:end.end()]
            start = pos = end.end()
        rest = buf[start:]
        pending, tail = ([rest] if rest else []), rest[-3:]
    if pending:
        yield b"".join(pending)


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


class RecallStream(StreamRelay):
    def __init__(self, loop: Recall, r: httpx.Response, headers: list[tuple[bytes, bytes]],
                 started: float, on_done: Done, max_held_bytes: int = 1_000_000) -> None:
        # the body may change length (a recall round): no content-length, chunked; it
        # goes out decoded (the caller checked the encoding is ``readable``)
        super().__init__(r, [(k, v) for k, v in headers
                             if k not in (b"content-length", b"content-encoding")], None,
                         started, on_done)
        self.loop, self.max_held_bytes = loop, max_held_bytes
        self.continuity = loop.wire.continuity()
        self._sent_end = False  # the final reply's end event went out

    def _usage(self) -> Usage:
        return self.loop.usage()

    def _ended(self) -> bool:
        return self._sent_end

    async def _body(self, send: Send) -> str:
        """Relay reply after reply; the error that stops the stream, or ``""``."""
        while True:
            reader, held = await self._relay(send)
            if not held or reader.hold.client_first or not self.loop.answer_calls(reader.turn()):
                for event in held:
                    await self._send(send, event, event_json(event), None, reader)
                return ""
            await self.r.aclose()
            try:
                self.r = await self.loop.ask_again()
            except ProxyError as exc:
                return f"recall follow-up failed: {exc.message}"
            if self.r.status_code != 200 or not self.r.headers.get(
                    "content-type", "").startswith("text/event-stream"):
                return f"recall follow-up answered {self.r.status_code}"
            if not readable(self.r.headers.get("content-encoding", "")):
                return "recall follow-up answered in a content-encoding the proxy cannot read"

    async def _relay(self, send: Send) -> tuple[Reader, list[bytes]]:
        """Send one reply's events up to its first recall call; hold the rest (up to
        ``max_held_bytes``: past it, relay them and the rest)."""
        reader, held, size, relaying = self.loop.wire.reader(), list[bytes](), 0, False
        tap = UsageTap(stream=True)  # the events are decoded
        self.continuity.start(bool(self.loop.rounds))
        async for event in sse_events(self.r):
            tap.feed(event)
            obj = event_json(event)
            recall = reader.take(obj) if obj is not None else False
            if relaying or not (held or recall):
                await self._send(send, event, obj, reader, reader)
                continue
            held.append(event)
            size += len(event)
            if size > self.max_held_bytes:
                log.warning("recall: a reply held past %d bytes is relayed without its recall calls",
                            self.max_held_bytes)
                for e in held:
                    await self._send(send, e, event_json(e), reader, reader)
                held, relaying = [], True
        self.loop.usages.append(tap.close())
        if reader.usage is not None:
            self.loop.raw_usages.append(reader.usage)
        return reader, held

    async def _send(self, send: Send, event: bytes, obj: dict[str, Any] | None,
                    live: Reader | None, reader: Reader) -> None:
        """One event to the client, its recall calls hidden (``reader``: the reply it is
        from), as ``Continuity`` has it (``live``: the reply being read, whose usage is not
        in ``loop.raw_usages`` yet)."""
        if obj is not None:
            shown = reader.hide(obj)
            if shown is None:
                return
            if shown is not obj:
                event, obj = with_data(event, shown), shown
            usages = self.loop.raw_usages + ([live.usage] if live is not None and live.usage else [])
            out = self.continuity.event(obj, bool(self.loop.rounds), usages)
            if out is None:
                return
            if out is not obj:
                event = with_data(event, out)
            kind = out.get("type")
            self._sent_end = self._sent_end or kind in END_EVENTS
        await send({"type": "http.response.body", "body": event, "more_body": True})
        self._sent_end = self._sent_end or event.rstrip().endswith(b"data: [DONE]")


def with_data(event: bytes, obj: dict[str, Any]) -> bytes:
    """The event with its data line replaced by ``obj`` (its other lines as sent)."""
    lines = [line for line in event.splitlines() if line.strip()]
    data = b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    out = [data if line.startswith(b"data:") else line for line in lines]
    return b"\n".join(out) + b"\n\n"
