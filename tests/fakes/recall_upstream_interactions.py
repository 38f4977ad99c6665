"""The recall upstream (tests/fakes/recall_upstream.py) on Gemini's Interactions API.

The same script (``decide``, by model name) reads the request through the proxy's own
adapter (the neutral view) and answers as the Interactions API does: a whole interaction
(``steps``, ``usage``, ``status`` ``requires_action`` when it calls a function, the
``tools`` and ``previous_interaction_id`` it was given), or its
event stream (``interaction.created``, ``interaction.status_update``, ``step.start`` /
``step.delta`` / ``step.stop``, ``interaction.completed`` without its steps, as streamed
lifecycle events may leave them out). A streamed reply first says ``Let me check. `` in a
``model_output`` step; a call's ``step.start`` carries its id and name with empty
``arguments``, which follow as ``arguments_delta`` pieces of JSON text.

Like the real server, it keeps every interaction (``store`` not false) under its id
(``v1_int<n>``): a ``previous_interaction_id`` continues that one's input and steps (an
unknown one is a 404), so the script sees the whole history. Usage: 100 + 10 per neutral
message input tokens, 5 output tokens.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from context_engine.proxy.demo.mock_upstream import ServerThread
from context_engine.proxy.dialects.interactions.recall import client_steps
from context_engine.proxy.dialects.interactions.request import parse
from context_engine.proxy.dialects.recall_wire import tool_name
from tests.fakes.recall_upstream import decide

LEAD = "Let me check. "


def _sse(data: dict[str, Any]) -> bytes:
    return f"event: {data['event_type']}\ndata: {json.dumps(data)}\n\n".encode()


class InteractionsRecallUpstream(ServerThread):
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.prompts: list[int] = []
        self.stored: dict[str, list[Any]] = {}  # id -> the whole history it ends
        super().__init__(Starlette(routes=[Route("/{path:path}", self.create, methods=["POST"])]))

    async def create(self, request: Request) -> Response:
        body = json.loads(await request.body())
        self.requests.append(body)
        previous = body.get("previous_interaction_id")
        if previous and previous not in self.stored:
            return JSONResponse({"error": {"code": 404, "message": f"Interaction {previous} not found.",
                                           "status": "NOT_FOUND"}}, status_code=404)
        history = self.stored.get(previous, []) + client_steps(body.get("input"))
        whole = {**body, "input": history}
        messages = parse(json.dumps(whole).encode()).chat["messages"]
        text, calls = decide({"model": body.get("model"), "messages": messages,
                              "tools": [{"function": {"name": tool_name(t)}} for t in body.get("tools") or []]})
        prompt = 100 + 10 * len(messages)
        self.prompts.append(prompt)
        rid = f"v1_int{len(self.requests)}"
        steps = [{"type": "function_call", "id": c["id"], "name": c["function"]["name"],
                  "arguments": json.loads(c["function"]["arguments"])} for c in calls] or \
            [{"type": "model_output", "content": [{"type": "text", "text": str(text)}]}]
        if body.get("store") is not False:
            self.stored[rid] = history + steps
        usage = {"total_input_tokens": prompt, "total_output_tokens": 5, "total_tokens": prompt + 5}
        status = "requires_action" if calls else "completed"
        head = {"id": rid, "object": "interaction", "model": body.get("model"),
                **({"previous_interaction_id": previous} if previous else {})}
        if not body.get("stream"):
            return JSONResponse({**head, "status": status, "steps": steps, "usage": usage,
                                 **({"tools": body["tools"]} if "tools" in body else {})})
        return StreamingResponse(self._events(head, status, steps, usage), media_type="text/event-stream")

    async def _events(self, head: dict[str, Any], status: str, steps: list[dict[str, Any]],
                      usage: dict[str, Any]) -> AsyncIterator[bytes]:
        yield _sse({"event_type": "interaction.created", "interaction": {**head, "status": "in_progress"}})
        yield _sse({"event_type": "interaction.status_update", "interaction_id": head["id"],
                    "status": "in_progress"})
        for n, step in enumerate([{"type": "model_output", "content": [{"type": "text", "text": LEAD}]},
                                  *steps]):
            if step["type"] == "function_call":
                yield _sse({"event_type": "step.start", "index": n, "step": {**step, "arguments": {}}})
                args = json.dumps(step["arguments"])
                for i in range(0, len(args), 9):
                    yield _sse({"event_type": "step.delta", "index": n,
                                "delta": {"type": "arguments_delta", "arguments": args[i:i + 9]}})
            else:
                yield _sse({"event_type": "step.start", "index": n, "step": {"type": "model_output"}})
                text = step["content"][0]["text"]
                for i in range(0, len(text), 40):
                    yield _sse({"event_type": "step.delta", "index": n,
                                "delta": {"type": "text", "text": text[i:i + 40]}})
            yield _sse({"event_type": "step.stop", "index": n})
        yield _sse({"event_type": "interaction.status_update", "interaction_id": head["id"], "status": status})
        yield _sse({"event_type": "interaction.completed",
                    "interaction": {**head, "status": status, "usage": usage}})
