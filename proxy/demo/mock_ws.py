"""The loopback mock's Responses API over a WebSocket (``/v1/responses``), as Codex CLI
uses it when its provider ``supports_websockets``.

Each ``response.create`` message is a turn: the mock answers with the HTTP stream's
events (``mock_apis.responses_stream``), one JSON text message each, every response
with an id of its own (``resp_ws_<n>``). The socket holds what it answered: a message
naming a ``previous_response_id`` continues that response's input and output (unknown
ids get an ``error`` event, as the API answers them), so the mock's script, token counts
and cache simulation see the whole conversation. ``generate: false`` (a warm-up) gets an
empty response. Every message is recorded (method ``WS``, the raw text as the body).

Models ``mock-ws-close`` (the socket closes, cleanly, after the first events of the
turn), ``mock-ws-error`` (an ``error`` event with status 500) and ``mock-ws-stall`` (the
first event, then nothing until the client leaves) drive the proxy's fault paths; the key ``sk-invalid`` is refused at the handshake with a 401.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import WebSocketRoute
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from context_engine.proxy.demo import mock_apis
from context_engine.proxy.demo.mock_upstream import (
    MockState,
    MockUpstream,
    Received,
    ServerThread,
    _prompt_tokens,
    _told,
    build_mock_app,
)
from context_engine.proxy.dialects.responses.request import parse as parse_responses

PATHS = ("/v1/responses", "/responses")


def _error(status: int, code: str, message: str) -> str:
    return json.dumps({"type": "error", "status": status, "error": {
        "type": "invalid_request_error", "code": code, "message": message, "param": None}})


def handler(state: MockState, sent: list[str],
            closed: list[int]) -> Callable[[WebSocket], Awaitable[None]]:
    """The socket's handler; every message it sends is appended to ``sent``, the close
    code of every client that leaves to ``closed``."""
    async def serve(websocket: WebSocket) -> None:
        headers = dict(websocket.headers)
        if headers.get("authorization") == "Bearer sk-invalid":
            await websocket.send_denial_response(JSONResponse({"error": {
                "message": "Incorrect API key provided.", "type": "invalid_request_error",
                "param": None, "code": "invalid_api_key"}}, 401))
            return
        offered = websocket.scope.get("subprotocols") or []
        await websocket.accept(subprotocol=offered[0] if offered else None,
                               headers=[(b"x-codex-turn-state", b"mock-turn-state")])
        held: dict[str, list[Any]] = {}  # response id -> its whole input and output
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                closed.append(int(message.get("code") or 1005))
                return
            text = message.get("text") or ""
            state.received.append(Received("WS", websocket.url.path, "", headers, text.encode()))
            try:
                data = json.loads(text)
            except ValueError:
                await websocket.send_text(_error(400, "invalid_json", "The message is not JSON."))
                continue
            if not isinstance(data, dict) or data.get("type") != "response.create":
                continue
            if not await _turn(state, websocket, data, held, sent):
                if body_model(data) == "mock-ws-stall":  # the client left mid-turn
                    closed.append(int((await websocket.receive()).get("code") or 1005))
                return

    return serve


async def _turn(state: MockState, websocket: WebSocket, data: dict[str, Any],
                held: dict[str, list[Any]], sent: list[str]) -> bool:
    """Answer one ``response.create``; False when the socket was closed on purpose."""

    async def send(text: str) -> None:
        sent.append(text)
        await websocket.send_text(text)

    body = {k: v for k, v in data.items() if k != "type"}
    previous = body.get("previous_response_id")
    if previous and previous not in held:
        await send(_error(400, "previous_response_not_found",
                                         f"Previous response with id '{previous}' not found."))
        return True
    given = body.get("input")
    items = list(held.get(str(previous or ""), [])) + (
        given if isinstance(given, list) else [{"role": "user", "content": given}] if given else [])
    full = {k: v for k, v in {**body, "input": items}.items() if k != "previous_response_id"}
    rid = f"resp_ws_{len(held) + 1}"
    if body.get("generate") is False:
        held[rid] = items
        for kind in ("response.created", "response.completed"):
            response = {**mock_apis.response_object(body, [], None), "id": rid}
            await send(json.dumps({"type": kind, "response": response}))
        return True
    if body.get("model") == "mock-ws-error":
        await send(json.dumps({"type": "error", "status": 500, "error": {
            "type": "server_error", "code": "server_error", "message": "boom", "param": None}}))
        return True
    neutral = parse_responses(json.dumps(full).encode()).chat["messages"]
    rendered = ([full["instructions"]] if isinstance(full.get("instructions"), str) else []) + items
    prompt, cached = _prompt_tokens(state, full, neutral, rendered)
    reply = mock_apis.next_reply(state, "responses", full.get("tools") or [], neutral)
    usage = mock_apis.responses_usage(*_told(state, prompt, cached))
    count = 0
    async for chunk in mock_apis.responses_stream(body, reply, usage):
        line = next(x for x in chunk.decode().split("\n") if x.startswith("data: "))
        event = json.loads(line[6:])
        if isinstance(event.get("response"), dict):
            event["response"]["id"] = rid
        await send(json.dumps(event))
        count += 1
        if body.get("model") == "mock-ws-close" and count == 3:
            await websocket.close(1000)
            return False
        if body.get("model") == "mock-ws-stall" and count == 1:
            return False
    held[rid] = items + mock_apis.responses_items(body, reply)
    return True


def body_model(data: dict[str, Any]) -> str:
    return str(data.get("model") or "")


def with_websocket(app: ASGIApp, state: MockState, sent: list[str], closed: list[int]) -> ASGIApp:
    """``app`` with the WebSocket routes in front (every other scope goes to ``app``)."""
    sockets = Starlette(routes=[WebSocketRoute(p, handler(state, sent, closed)) for p in PATHS])

    async def asgi(scope: Scope, receive: Receive, send: Send) -> None:
        await (sockets if scope["type"] == "websocket" else app)(scope, receive, send)

    return asgi


class MockWsUpstream(MockUpstream):
    """The loopback mock, speaking the Responses API over WebSocket too."""

    def __init__(self, port: int = 0, simulate_cache: bool = True,
                 script: list[dict[str, Any]] | None = None, max_input_tokens: int = 0) -> None:
        super().__init__(port, simulate_cache, script, max_input_tokens)
        self.sent: list[str] = []  # every message the WebSocket side sent, in order
        self.closed: list[int] = []  # the close code of every client socket that left
        ServerThread.__init__(self, with_websocket(build_mock_app(self.state), self.state,
                                                   self.sent, self.closed), port)
