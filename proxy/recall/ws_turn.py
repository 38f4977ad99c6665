"""One ``response.create`` turn on a Responses WebSocket: the upstream's events to the
client, its usage read on the way, ``context_recall`` answered inside the proxy.

Without a recall loop every upstream message goes to the client as it came (the same
text), and the turn ends with the first ``response.completed``/``incomplete``/``failed``
or ``error`` event. With one, the turn is the HTTP stream's (``recall.stream``): events
go out until a ``context_recall`` call begins, from there they are held; at the reply's
end the calls are resolved and the follow-up goes up the same socket as another
``response.create``; the client sees one response (``Continuity``: the first reply's id,
summed usage). The follow-up creates a response the client never saw, so the turn
reports both ids (``ids``): the client's next ``previous_response_id`` is mapped to the
response the upstream holds the whole chain under.

A turn cut short (``fail``: the upstream closed or broke, the client left) is recorded
with that error; ``on_done`` runs exactly once.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from context_engine.proxy.dialects.dialect import Dialect
from context_engine.proxy.dialects.recall_wire import Reader
from context_engine.proxy.dialects.responses import ws
from context_engine.proxy.dialects.usage import Usage
from context_engine.proxy.engine.recall_resolve import resolve_calls
from context_engine.proxy.recall.loop import Recall
from context_engine.proxy.transport.intake import off_loop
from context_engine.proxy.transport.relay import Done

log = logging.getLogger("context_engine.recall")
Send = Callable[[str], Awaitable[None]]
Settle = Callable[[int], Awaitable[None]]


def _json(text: str) -> dict[str, Any] | None:
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


class WsTurn:
    def __init__(self, dialect: Dialect, message: ws.Message, to_client: Send, to_upstream: Send,
                 settle: Settle, on_done: Done, loop: Recall | None = None,
                 max_held_bytes: int = 1_000_000) -> None:
        self.dialect, self.message, self.loop = dialect, message, loop
        self.to_client, self.to_upstream, self.settle, self.on_done = to_client, to_upstream, settle, on_done
        self.max_held_bytes = max_held_bytes
        self.started = time.perf_counter()
        self.usage = Usage()  # this reply's (with a loop: summed over replies at the end)
        self.ended = False  # the turn's last event reached the client
        self.done = False
        self.ids: tuple[str, str] | None = None
        if loop is not None:
            self.continuity = loop.wire.continuity()
            self._reply()

    def _reply(self) -> None:
        assert self.loop is not None
        self.reader: Reader = self.loop.wire.reader()
        self.held: list[tuple[str, dict[str, Any] | None]] = []
        self.size, self.relaying, self.usage = 0, False, Usage()
        self.continuity.start(bool(self.loop.rounds))

    async def take(self, text: str) -> bool:
        """One upstream message of this turn; True when the turn is over."""
        obj = _json(text)
        if obj is not None:
            self.dialect.take_usage(self.usage, obj)
        error = obj is not None and obj.get("type") == ws.ERROR
        last = error or (obj is not None and self.dialect.ends(b"", obj))
        if self.loop is None:
            await self.to_client(text)
            if last:
                self.ended = True
                await self._finish(ws.event_status(obj) if error else 200,
                                   ws.event_error(obj) if error else "")
            return last
        return await self._take_recall(text, obj, last, error)

    async def _take_recall(self, text: str, obj: dict[str, Any] | None, last: bool,
                           error: bool) -> bool:
        loop = self.loop
        assert loop is not None
        recall = self.reader.take(obj) if obj is not None else False
        if self.relaying or not (self.held or recall) or error:
            await self._send(text, obj, self.reader)
        else:
            self.held.append((text, obj))
            self.size += len(text)
            if self.size > self.max_held_bytes:
                log.warning("recall: a reply held past %d bytes is relayed without its recall calls",
                            self.max_held_bytes)
                await self._flush(self.reader)
                self.relaying = True
        if not last:
            return False
        loop.usages.append(self.usage)
        if self.reader.usage is not None:
            loop.raw_usages.append(self.reader.usage)
        if error or not self.held or self.reader.hold.client_first or \
                not loop.answer_calls(self.reader.turn()):
            await self._flush(None)
            self.ended = True
            first = getattr(self.continuity, "first_id", None)  # the Responses wire's
            final = getattr(self.reader, "response", None)
            if loop.rounds and first and isinstance(final, dict) and final.get("id"):
                self.ids = (str(first), str(final["id"]))
            await self._finish(ws.event_status(obj) if error else 200,
                               ws.event_error(obj) if error else "")
            return True
        turn, results = loop.rounds[-1]
        results[:] = await resolve_calls(loop.scope, [c.arguments for c in turn.calls], lane=loop.lane,
                                         session=loop.session, max_calls=loop.max_calls,
                                         deadline_s=loop.deadline_s)
        body = await off_loop(len(loop.sent), self._follow_up)
        self._reply()
        await self.to_upstream(ws.frame(self.message, body))
        return False

    def _follow_up(self) -> bytes:
        loop = self.loop
        assert loop is not None
        return loop.wire.follow_up(json.loads(loop.sent), loop.rounds,
                                   last=len(loop.rounds) >= loop.max_rounds)

    async def _flush(self, live: Reader | None) -> None:
        held, self.held = self.held, []
        for text, obj in held:
            await self._send(text, obj, live)

    async def _send(self, text: str, obj: dict[str, Any] | None, live: Reader | None) -> None:
        """One event to the client, its recall calls hidden, as ``Continuity`` has it
        (``live``: the reply being read, whose usage is not in ``raw_usages`` yet)."""
        loop = self.loop
        assert loop is not None
        if obj is not None:
            shown = self.reader.hide(obj)
            if shown is None:
                return
            usages = loop.raw_usages + ([live.usage] if live is not None and live.usage else [])
            out = self.continuity.event(shown, bool(loop.rounds), usages)
            if out is None:
                return
            if out is not obj:
                text = json.dumps(out, ensure_ascii=False, separators=(",", ":"))
        await self.to_client(text)

    async def fail(self, error: str, status: int) -> None:
        """The turn cut short: recorded with ``error`` (nothing more reaches the client)."""
        if self.loop is not None and (not self.loop.usages or self.loop.usages[-1] is not self.usage):
            self.loop.usages.append(self.usage)
        await self._finish(status, error)

    async def _finish(self, status: int, error: str) -> None:
        if self.done:
            return
        self.done = True
        try:
            await self.settle(status)
        finally:
            usage = self.loop.usage() if self.loop is not None else self.usage
            self.on_done(usage, (time.perf_counter() - self.started) * 1000, error, status)
