"""A loopback chat-completions upstream whose replies are gzip "bombs": a few hundred
kilobytes on the wire that decompress to ``EXPANDED`` bytes, sent with
``content-encoding: gzip`` whatever the request accepts.

The model name picks the reply:

- ``bomb-json``: a JSON completion whose content is ``EXPANDED`` spaces;
- ``bomb-stream``: an SSE stream, one ``data:`` line of ``EXPANDED`` bytes that never ends;
- anything else: a small gzip completion with usage (the ordinary case).

``offered`` records, per request, whether it offered ``context_recall``; ``sent`` holds
the compressed bytes of each bomb, to compare with what a client got.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from context_engine.proxy.demo.mock_upstream import ServerThread

EXPANDED = 256 * 1024 * 1024
STEP = 1024 * 1024
CHUNK = 16 * 1024


def gzip_of(head: bytes, fill: bytes, tail: bytes) -> bytes:
    """``head + fill * (EXPANDED / len(fill)) + tail`` gzipped, never held expanded."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    out = [z.compress(head)]
    block = fill * (STEP // len(fill))
    out += [z.compress(block) for _ in range(EXPANDED // STEP)]
    out += [z.compress(tail), z.flush()]
    return b"".join(out)


class BombUpstream(ServerThread):
    def __init__(self) -> None:
        self.offered: list[bool] = []
        self.sent = {
            "bomb-json": gzip_of(b'{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,'
                                 b'"message":{"role":"assistant","content":"', b" ", b'"},"finish_reason":"stop"}],'
                                 b'"usage":{"prompt_tokens":3,"completion_tokens":1}}'),
            "bomb-stream": gzip_of(b"data: ", b"x", b""),
        }
        super().__init__(Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"])]))

    async def chat(self, request: Request) -> Response:
        body: dict[str, Any] = json.loads(await request.body())
        self.offered.append(any((t.get("function") or {}).get("name") == "context_recall"
                                for t in body.get("tools") or []))
        model = str(body.get("model"))
        blob = self.sent.get(model)
        if blob is None:
            small = {"id": "c", "object": "chat.completion", "model": "m", "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
            return Response(gzip.compress(json.dumps(small).encode()), headers={
                "content-type": "application/json", "content-encoding": "gzip"})
        kind = "text/event-stream" if model == "bomb-stream" else "application/json"

        async def chunks() -> AsyncIterator[bytes]:
            for i in range(0, len(blob), CHUNK):
                yield blob[i:i + CHUNK]

        return StreamingResponse(chunks(), headers={"content-type": kind, "content-encoding": "gzip"})
