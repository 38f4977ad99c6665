"""The loopback mock's Gemini Interactions API (``POST /v1beta/interactions``,
``/v1/interactions``), as the real one answers.

One reply (a ``function_call`` step of the first declared function when the last turn
is the user's, the script's next step for a shell tool, else a ``model_output``) as a
whole interaction, or as its event stream (``interaction.created``, ``step.start`` /
``step.delta`` / ``step.stop``, ``interaction.completed`` with the usage).
``usage.total_cached_tokens`` is the simulated implicit cache. The model ``mock-500``
gets a 500 in Google's error shape; ``mock-cut`` a stream cut off after its first delta.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from context_engine.proxy.demo.mock_apis import Reply, _sig, next_reply, sse
from context_engine.proxy.dialects.interactions.request import parse


def usage(prompt: int, cached: int) -> dict[str, Any]:
    out: dict[str, Any] = {"total_input_tokens": prompt, "total_output_tokens": 9,
                           "total_tokens": prompt + 9,
                           "input_tokens_by_modality": [{"modality": "text", "tokens": prompt}]}
    if cached:
        out["total_cached_tokens"] = cached
    return out


def steps(reply: Reply) -> list[dict[str, Any]]:
    if reply.tool:
        return [{"type": "function_call", "id": reply.call_id, "name": reply.tool,
                 "arguments": reply.arguments}]
    return [{"type": "model_output", "content": [{"type": "text", "text": reply.text}]}]


def interaction(body: dict[str, Any], reply: Reply, meta: dict[str, Any] | None,
                status: str) -> dict[str, Any]:
    out: dict[str, Any] = {"id": "v1_" + _sig("int", reply, body.get("input")), "object": "interaction",
                           "status": status, "model": body.get("model", "mock"),
                           "created": "2026-01-01T00:00:00Z", "updated": "2026-01-01T00:00:00Z"}
    if body.get("previous_interaction_id"):
        out["previous_interaction_id"] = body["previous_interaction_id"]
    if meta is not None:
        out["steps"], out["usage"] = steps(reply), meta
    return out


async def stream(body: dict[str, Any], reply: Reply, meta: dict[str, Any]) -> AsyncIterator[bytes]:
    status = "requires_action" if reply.tool else "completed"
    head = interaction(body, reply, None, "in_progress")
    yield sse("interaction.created", {"interaction": head, "event_type": "interaction.created"})
    yield sse("interaction.status_update", {"interaction_id": head["id"], "status": "in_progress",
                                            "event_type": "interaction.status_update"})
    for n, step in enumerate(steps(reply)):
        if step["type"] == "function_call":
            yield sse("step.start", {"index": n, "step": step, "event_type": "step.start"})
        else:
            yield sse("step.start", {"index": n, "step": {"type": "model_output"},
                                     "event_type": "step.start"})
            words = step["content"][0]["text"].split(" ")
            for i, w in enumerate(words):
                text = w + (" " if i < len(words) - 1 else "")
                yield sse("step.delta", {"index": n, "delta": {"type": "text", "text": text},
                                         "event_type": "step.delta"})
                if body.get("model") == "mock-cut":
                    raise ConnectionResetError("mock-cut: the stream breaks off")
                await asyncio.sleep(0)
        yield sse("step.stop", {"index": n, "event_type": "step.stop"})
    done = {**interaction(body, reply, meta, status), "steps": []}
    yield sse("interaction.completed", {"interaction": done, "event_type": "interaction.completed"})


def handler(state: Any, record: Callable[[Request], Awaitable[bytes]],
            prompt_tokens: Callable[..., tuple[int, int]]) -> Callable[[Request], Awaitable[Response]]:
    """The route's endpoint; ``prompt_tokens(state, body, neutral, items)`` counts and
    simulates the cache (``mock_upstream``)."""

    async def create(request: Request) -> Response:
        raw = await record(request)
        body = json.loads(raw)
        if body.get("model") == "mock-500":
            return JSONResponse({"error": {"code": 500, "message": "Internal error encountered.",
                                           "status": "INTERNAL"}}, status_code=500)
        neutral = parse(raw).chat["messages"]
        items = body.get("input") if isinstance(body.get("input"), list) else [body.get("input")]
        system = [body["system_instruction"]] if body.get("system_instruction") else []
        prompt, cached = prompt_tokens(state, body, neutral, system + items)
        tools = [t for t in body.get("tools") or () if isinstance(t, dict) and t.get("type") == "function"]
        reply = next_reply(state, "interactions", tools, neutral)
        meta = usage(prompt, cached)
        if body.get("stream") is True:
            return StreamingResponse(stream(body, reply, meta), media_type="text/event-stream")
        return JSONResponse(interaction(body, reply, meta, "requires_action" if reply.tool else "completed"))

    return create
