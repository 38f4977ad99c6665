"""The loopback mock's Gemini ``generateContent``, as the real one answers.

One reply (a ``functionCall`` of the first declared function when the last turn is the
user's, the script's next step for a shell tool, else text) as a JSON body, as an SSE
stream (``?alt=sse``: whole responses, the last with ``finishReason`` and
``usageMetadata``) or as one JSON array (a stream without ``alt=sse``). Calls carry no
``id``, as Gemini's mostly do not. ``usageMetadata.cachedContentTokenCount`` is the
simulated implicit cache.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from context_engine.proxy.demo.mock_apis import Reply, next_reply
from context_engine.proxy.dialects.gemini.request import parse


def declarations(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The declared functions, each with ``parameters`` (for ``next_reply``)."""
    return [{**f, "parameters": f.get("parameters") or f.get("parametersJsonSchema") or {}}
            for t in body.get("tools") or () if isinstance(t, dict)
            for f in t.get("functionDeclarations") or () if isinstance(f, dict)]


def usage(prompt: int, cached: int) -> dict[str, Any]:
    meta: dict[str, Any] = {"promptTokenCount": prompt, "candidatesTokenCount": 9,
                            "totalTokenCount": prompt + 9,
                            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}]}
    if cached:
        meta["cachedContentTokenCount"] = cached
    return meta


def _response(model: str, parts: list[dict[str, Any]], meta: dict[str, Any] | None,
              finish: bool) -> dict[str, Any]:
    cand: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if finish:
        cand["finishReason"] = "STOP"
    out: dict[str, Any] = {"candidates": [cand]}
    if meta is not None:
        out["usageMetadata"] = meta
    return {**out, "modelVersion": model, "responseId": "mock-gemini"}


def _chunks(model: str, reply: Reply, meta: dict[str, Any]) -> list[dict[str, Any]]:
    if reply.tool:
        call = {"functionCall": {"name": reply.tool, "args": reply.arguments}}
        return [_response(model, [call], meta, True)]
    words = reply.text.split(" ")
    texts = [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]
    return [_response(model, [{"text": t}], meta if i == len(texts) - 1 else None, i == len(texts) - 1)
            for i, t in enumerate(texts)]


async def _sse(chunks: list[dict[str, Any]]) -> AsyncIterator[bytes]:
    for c in chunks:
        yield b"data: " + json.dumps(c).encode() + b"\r\n\r\n"
        await asyncio.sleep(0)


def handler(state: Any, record: Callable[[Request], Awaitable[bytes]],
            prompt_tokens: Callable[..., tuple[int, int]]) -> Callable[[Request], Awaitable[Response]]:
    """The route's endpoint; ``prompt_tokens(state, body, neutral, items)`` counts and
    simulates the cache (``mock_upstream``)."""

    async def generate(request: Request) -> Response:
        raw = await record(request)
        if request.headers.get("x-goog-api-key") == "sk-invalid":
            return JSONResponse({"error": {"code": 400, "message": "API key not valid.",
                                           "status": "INVALID_ARGUMENT"}}, status_code=400)
        body = json.loads(raw)
        parsed = parse(raw, request.url.path)
        neutral, model = parsed.chat["messages"], parsed.chat["model"]
        system = [body["systemInstruction"]] if body.get("systemInstruction") else []
        prompt, cached = prompt_tokens(state, body, neutral, system + list(body.get("contents") or []))
        reply = next_reply(state, "gemini", declarations(body), neutral)
        chunks = _chunks(model, reply, usage(prompt, cached))
        if not parsed.stream:
            parts = [p for c in chunks for p in c["candidates"][0]["content"]["parts"]]
            text = "".join(p.get("text", "") for p in parts)
            whole = parts if reply.tool else [{"text": text}]
            return JSONResponse(_response(model, whole, usage(prompt, cached), True))
        if request.query_params.get("alt") == "sse":
            return StreamingResponse(_sse(chunks), media_type="text/event-stream")
        return JSONResponse(chunks)

    return generate
