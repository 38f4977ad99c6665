"""An upstream that checks keys: a request whose ``Authorization`` is not ``Bearer
<GOOD_KEY>`` gets 401 in OpenAI's error shape (what a made-up key gets); the good key
gets a chat completion. ``status`` (a mutable attribute) makes it answer every request
with another refusal (400, 404, 429, …) instead."""

from __future__ import annotations

import json

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from context_engine.proxy.demo.server_thread import ServerThread

GOOD_KEY = "sk-good-key"
COMPLETION = {"id": "c-1", "object": "chat.completion", "created": 0, "model": "gpt-4o",
              "choices": [{"index": 0, "finish_reason": "stop",
                           "message": {"role": "assistant", "content": "ok"}}],
              "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}}


class RefusingUpstream(ServerThread):
    def __init__(self) -> None:
        self.status = 401
        self.seen = 0
        super().__init__(Starlette(routes=[Route("/{path:path}", self.answer, methods=["POST"])]))

    async def answer(self, request: Request) -> Response:
        await request.body()
        self.seen += 1
        if request.headers.get("authorization") == f"Bearer {GOOD_KEY}" and self.status == 401:
            return JSONResponse(COMPLETION)
        error = {"error": {"message": "refused", "type": "invalid_request_error", "code": None,
                           "param": None}}
        return Response(json.dumps(error), status_code=self.status, media_type="application/json")
