"""A streamed reply with recall rounds (``recall.loop`` explains the loop).

Events go to the client as they come until a ``context_recall`` call begins (the API's
``Reader`` says when: the call's name comes first on every API); from there they are
held to the end of the reply. Then the held events are dropped, the calls resolved, and
the stream continues with the follow-up's events, as the API's ``Continuity`` has them
(see each dialect's recall wire). The client's own tool calls before it stream as they come.

The reply is relayed instead, with its recall calls left out (``Reader.hide``: later
indices closed up, a stop reason of "tool calls" with none left becomes a plain stop),
when one of the client's calls went out before the recall call (asking again would
repeat it), when no round is left, or when the held events pass ``max_held_bytes``
(from there on the rest streams as it comes). An upstream fault mid-stream, or a
follow-up that fails, aborts the stream as ``relay`` does.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
from starlette.types import Send

from context_engine.proxy.dialects.recall_wire import Reader
from context_engine.proxy.dialects.usage import Usage
from context_engine.proxy.errors import ProxyError
from context_engine.proxy.recall.loop import Recall
from context_engine.proxy.transport.decoding import readable
from context_engine.proxy.transport.relay import Done, StreamRelay
from context_engine.proxy.transport.sse import event_json, payloads, sse_events, with_data
from context_engine.proxy.transport.usage_tap import UsageTap

log = logging.getLogger("context_engine.recall")


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
        tap = UsageTap(self.loop.dialect, stream=True)  # the events are decoded
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
        out: dict[str, Any] | None = None
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
        await send({"type": "http.response.body", "body": event, "more_body": True})
        ends = self.loop.dialect.ends
        self._sent_end = self._sent_end or any(ends(p, out) for p in payloads(event))

