"""Scripted upstreams on loopback, and the bodies they answer with.

- ``ChatUpstream``: a Chat Completions endpoint whose ``answer`` script a test writes
  (a completion's JSON, or any ``Response``); it records the request bodies.
- ``completion``: a chat completion's JSON; ``BOOM``, ``ANTHROPIC_BOOM``: a 500's body.

The scripted servers with more behaviour sit beside this module: ``raw_upstream.py`` (a
raw socket that misbehaves on cue: the ``raw`` fixture), ``recall_upstream.py`` and
``recall_upstream_apis.py`` (a model that calls ``context_recall``, on each API). The
product's mock (``proxy/demo/mock_upstream.py``, the ``mock`` fixture) plays all three
APIs with their real bodies and streams for the end-to-end tests.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from context_engine.proxy.demo.server_thread import ServerThread

BOOM = b'{"error": {"message": "boom", "type": "server_error"}}'
ANTHROPIC_BOOM = b'{"type": "error", "error": {"type": "api_error", "message": "boom"}}'


def completion(message: str | dict[str, Any], model: Any = "mock", usage: Any = None,
               finish: str = "stop", **extra: Any) -> dict[str, Any]:
    """A chat completion: ``message`` (its text, or the whole assistant message),
    ``usage`` (default: 10 in, 10 out) and ``extra`` top-level fields (``id`` among them)."""
    if isinstance(message, str):
        message = {"role": "assistant", "content": message}
    if usage is None:
        usage = {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}
    return {"id": extra.pop("id", "chatcmpl-1"), "object": "chat.completion", "created": 0,
            "model": model, **extra,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage}


class ChatUpstream(ServerThread):
    """``POST /v1/chat/completions`` answered by ``answer(upstream, body)`` (sync or
    async): a completion's JSON, or a ``Response``. Request bodies go to ``requests``;
    ``mode`` is the test's to steer its script with."""

    def __init__(self, answer: Callable[[ChatUpstream, dict[str, Any]], Any], mode: str = "") -> None:
        self.requests: list[dict[str, Any]] = []
        self.mode = mode

        async def chat(request: Request) -> Response:
            body = json.loads(await request.body())
            self.requests.append(body)
            out = answer(self, body)
            if inspect.isawaitable(out):
                out = await out
            return out if isinstance(out, Response) else JSONResponse(out)

        super().__init__(Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])]))

    def __enter__(self) -> ChatUpstream:
        super().__enter__()
        return self
