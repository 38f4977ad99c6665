"""The Responses API over a WebSocket (``/v1/responses``): Codex CLI's transport when its
provider ``supports_websockets``.

The client's socket opens one to the upstream (``transport.ws_upstream``: same URL with
``ws``/``wss``, the client's headers and subprotocols as on HTTP); a handshake the
upstream refuses reaches the client as that HTTP response, an unreachable upstream as
the proxy's own 502/504. Then, on the one socket:

- each client ``response.create`` is a turn: its body (the message without ``type``) is
  what ``POST /v1/responses`` would carry, and goes through the HTTP route's own steps
  (``Conversation``: parse, rewrite, splice, ``context_recall`` offered) before it goes
  up with its ``type`` put back; turns go up one at a time, as the API serves them;
- every upstream event reaches the client as it came (``recall.ws_turn``); the turn's
  ledger row is written at its ``response.completed`` (or ``incomplete``/``failed``/
  ``error``) with that event's usage; a turn continuing ``previous_response_id`` is
  recorded as server-held state, as on HTTP;
- any other client message goes up unchanged; a message that is not a JSON object, or
  a ``response.create`` the dialect rejects, gets an ``error`` event and goes nowhere.

Faults stay faults: an upstream that closes or breaks mid-turn closes the client's
socket with an error code (its own when it sent one, else 1011), never a clean close;
between turns its close is passed on as it came. A client that leaves closes the
upstream socket with the client's code.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from starlette.responses import Response
from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from context_engine.proxy.dialects.responses import ws
from context_engine.proxy.dialects.usage import Usage
from context_engine.proxy.edge.conversation import Conversation
from context_engine.proxy.engine import modes, profiles
from context_engine.proxy.engine.session import caller_hash
from context_engine.proxy.errors import BadRequest, BodyTooLarge, ProxyError
from context_engine.proxy.recall.loop import Recall
from context_engine.proxy.recall.ws_turn import WsTurn
from context_engine.proxy.recording.row_parts import Answered
from context_engine.proxy.transport.intake import off_loop
from context_engine.proxy.transport.relay import CLIENT_DISCONNECTED
from context_engine.proxy.transport.upstream import kept_here
from context_engine.proxy.transport.ws_upstream import (
    Refused,
    accepted_headers,
    handshake_headers,
    open_upstream,
    subprotocols,
    ws_url,
)

log = logging.getLogger("context_engine.websocket")
CLEAN = (1000, 1001, 1005, 1006)  # closes that say nothing went wrong (or say nothing)
UPSTREAM_CLOSED = "upstream closed the WebSocket mid-response"


class ClientGone(Exception):
    """A send to the client failed: it left."""


class ResponsesSocket:
    """The WebSocket route of one dialect's ``Conversation`` (the Responses API)."""

    def __init__(self, conversation: Conversation) -> None:
        self.c = conversation

    async def handle(self, websocket: WebSocket) -> None:
        c = self.c
        raw = websocket.headers.raw
        try:
            url = ws_url(c.upstream.url_for(websocket.scope, c.dialect.versioned_paths))
            up = await open_upstream(url, handshake_headers(raw, kept_here(websocket.scope)),
                                     subprotocols(raw), c.settings.connect_timeout)
        except Refused as r:
            await deny(websocket, r.status, r.headers, r.body)
            return
        except ProxyError as exc:
            await deny(websocket, exc.status, [(b"content-type", b"application/json")],
                       c.dialect.error_body(exc))
            return
        try:
            await websocket.accept(subprotocol=up.subprotocol, headers=accepted_headers(up))
        except BaseException:
            await up.close()
            raise
        await Socket(c, websocket, up).run()


async def deny(websocket: WebSocket, status: int, headers: list[tuple[bytes, bytes]],
               body: bytes) -> None:
    """Refuse the handshake with an HTTP response (a plain close when the server cannot)."""
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        response = Response(body, status_code=status)
        response.raw_headers = [*headers, (b"content-length", str(len(body)).encode())]
        await websocket.send_denial_response(response)
    else:
        await websocket.close(1011 if status >= 500 else 1008)


class Socket:
    """One client socket and its upstream socket."""

    def __init__(self, c: Conversation, websocket: WebSocket, up: ClientConnection) -> None:
        self.c, self.websocket, self.up = c, websocket, up
        self.current: WsTurn | None = None
        self.idle = asyncio.Event()
        self.idle.set()
        self.chain: dict[str, str] = {}  # response ids the client saw -> the upstream's
        secret = c.dialect.credential(websocket.headers, websocket.url.query)
        self.caller = caller_hash(websocket.headers, c.session_key, secret)

    async def run(self) -> None:
        client = asyncio.create_task(self._from_client())
        upstream = asyncio.create_task(self._from_upstream())
        try:
            await asyncio.wait({client, upstream}, return_when=asyncio.FIRST_COMPLETED)
            if client.done() and not client.exception() and client.result() is None:
                await asyncio.wait({upstream})  # the upstream went away under a send: its close
        finally:
            for task in (client, upstream):
                task.cancel()
            await asyncio.gather(client, upstream, return_exceptions=True)
        closed, broke = _outcome(upstream), _broke(upstream) or _broke(client)
        if closed is None and broke is None:  # the client left
            code, reason = _outcome(client) or (1006, "")
            await self._end_turn(CLIENT_DISCONNECTED, 200)
            await self._close_upstream(code, reason)
            return
        if closed is None:  # the edge: a relay that broke is an error, never a clean end
            log.error("the WebSocket relay failed", exc_info=broke)
            await self._end_turn(f"the relay failed: {type(broke).__name__}", 502)
            await self._close_upstream(1011, "")
            await self._close_client(1011, "proxy error")
            return
        code, reason = closed
        mid_turn = self.current is not None and not self.current.ended
        await self._end_turn(f"{UPSTREAM_CLOSED} ({code})", 502)
        if mid_turn and code in CLEAN:
            code, reason = 1011, UPSTREAM_CLOSED
        await self._close_client(1011 if code in (1005, 1006) else code, reason)

    async def _from_client(self) -> tuple[int, str] | None:
        """Client messages until it leaves: its close code and reason (None: the upstream
        went away under a send)."""
        while True:
            message = await self.websocket.receive()
            if message["type"] == "websocket.disconnect":
                return int(message.get("code") or 1000), str(message.get("reason") or "")
            try:
                await self._client_message(message.get("text"), message.get("bytes"))
            except ConnectionClosed:
                return None  # the upstream is gone: its pump says how

    async def _client_message(self, text: str | None, data: bytes | None) -> None:
        if text is None:  # binary: not this API's, the upstream says so
            await self.up.send(data or b"")
            return
        try:
            parsed = ws.read(text)
        except BadRequest as exc:
            await self._to_client(ws.error_event(exc))
            return
        if not parsed.creates:
            await self.up.send(text)
            return
        await self.idle.wait()
        prepared = await self._turn(parsed)
        if prepared is None:
            return
        self.idle.clear()
        self.current, out = prepared
        await self.up.send(out)

    async def _from_upstream(self) -> tuple[int, str]:
        """Upstream messages to the client (a turn's through the turn) until it closes."""
        try:
            async for text in self.up:
                turn = self.current
                if turn is None or isinstance(text, bytes):
                    await self._to_client(text)
                elif await turn.take(text):
                    self._after(turn)
        except ConnectionClosed:
            pass
        return self.up.close_code or 1006, self.up.close_reason or ""

    def _after(self, turn: WsTurn) -> None:
        if turn.ids is not None:
            self.chain[turn.ids[0]] = turn.ids[1]
        self.current = None
        self.idle.set()

    async def _end_turn(self, error: str, status: int) -> None:
        turn, self.current = self.current, None
        if turn is not None and not turn.done:
            await turn.fail(error if not turn.ended or status != 200 else "", status)

    async def _to_client(self, text: str | bytes) -> None:
        try:
            if isinstance(text, bytes):
                await self.websocket.send_bytes(text)
            else:
                await self.websocket.send_text(text)
        except (OSError, RuntimeError, WebSocketDisconnect) as exc:
            raise ClientGone from exc

    async def _close_client(self, code: int, reason: str) -> None:
        try:
            await self.websocket.close(code, reason[:120])
        except (RuntimeError, OSError):  # it left already
            pass

    async def _close_upstream(self, code: int, reason: str) -> None:
        if code in (1005, 1006) or not (1000 <= code < 5000):
            code = 1000
        try:
            await self.up.close(code, reason[:120])
        except (ValueError, ConnectionClosed, OSError):
            await self.up.close()

    async def _turn(self, message: ws.Message) -> tuple[WsTurn, str] | None:
        """The turn for a ``response.create`` and the message that goes up (None: the
        proxy answered it with an error event)."""
        c, t0, arrived = self.c, time.perf_counter(), time.time()
        previous = ws.previous_id(message) if self.chain else ""
        if previous in self.chain:
            message = ws.with_previous(message, self.chain[previous])
        raw = message.body
        mode = modes.resolve(self.websocket.headers, c.settings.mode)
        try:
            if len(raw) > c.settings.max_body_bytes:
                raise BodyTooLarge(f"The message is over {c.settings.max_body_bytes} bytes.")
            body = await off_loop(len(raw), c.dialect.parse, raw, self.websocket.url.path,
                                  c.settings.rules_max_messages)
            try:
                choice = profiles.rules_choice(self.websocket.headers)
            except ValueError as exc:
                raise BadRequest(str(exc), param=profiles.HEADER) from None
        except ProxyError as exc:
            await self._to_client(ws.error_event(exc))
            return None
        c.finisher.begin()
        received, rewritten, rewrite, out, recall = await c.outgoing(  # the headers and url.path are here
            self.websocket, body, raw, mode, choice, self.caller, arrived, t0)
        loop = None if recall is None else Recall(
            c.upstream, "", [], out, recall.scope, c.settings.recall.max_rounds, c.dialect,
            lane=c.engine.requests, session=received.session,
            max_calls=c.settings.recall.max_calls, deadline_s=c.engine.deadline_s)
        shadow = received.arm == "shadow" and body.rewritable and not body.over

        def done(usage: Usage, upstream_ms: float, error: str, status: int) -> None:
            cost = loop.cost() if loop is not None else (0, 0, 0)
            c.finisher.schedule(received, rewritten, Answered.of(usage, status, upstream_ms, error, cost, loop),
                                body.chat, rewrite, usage, shadow=shadow, size=len(raw))

        async def settle(status: int) -> None:
            await c.engine.settle(rewrite, status)

        turn = WsTurn(c.dialect, message, self._to_client, self.up.send, settle, done, loop,
                      c.settings.recall.max_held_bytes)
        return turn, ws.frame(message, out)


def _outcome(task: asyncio.Task[Any]) -> tuple[int, str] | None:
    """A pump's close code and reason; None when it was cut or broke."""
    result = task.result() if task.done() and not task.cancelled() and not task.exception() else None
    return result if isinstance(result, tuple) else None


def _broke(task: asyncio.Task[Any]) -> BaseException | None:
    """What broke a pump, other than the client leaving."""
    exc = None if not task.done() or task.cancelled() else task.exception()
    return None if isinstance(exc, ClientGone) else exc
