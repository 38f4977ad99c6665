"""The recall upstream's Responses API (tests/fakes/recall_upstream_apis.py) over a
WebSocket: each ``response.create`` gets the same script's reply, as the HTTP stream's
events, one JSON text message each (ids ``resp_<n>``, one per reply). Every message
received and sent is kept."""

from __future__ import annotations

import itertools
import json
from typing import Any

from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket

from context_engine.proxy.demo.mock_upstream import ServerThread
from tests.fakes.recall_upstream_apis import _neutral, responses_reply, responses_stream


class RecallWsUpstream(ServerThread):
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.sent: list[str] = []
        ids = itertools.count(1)

        async def serve(websocket: WebSocket) -> None:
            await websocket.accept()
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    return
                data = json.loads(message["text"])
                self.messages.append(data)
                body = {k: v for k, v in data.items() if k != "type"}
                text, calls, prompt = _neutral(body, json.dumps(body).encode(), "responses")
                resp, items = responses_reply(body, f"resp_{next(ids)}", text, calls, prompt)
                for event in responses_stream(resp, text, items).split(b"\n\n"):
                    line = next((x for x in event.split(b"\n") if x.startswith(b"data: ")), None)
                    if line is not None:
                        self.sent.append(line[6:].decode())
                        await websocket.send_text(self.sent[-1])

        super().__init__(Starlette(routes=[WebSocketRoute("/v1/responses", serve)]))
