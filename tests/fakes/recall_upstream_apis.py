"""The recall upstream (tests/fakes/recall_upstream.py) on the Responses API and Anthropic Messages.

The same script (``decide``, by model name) reads the request through the proxy's own
adapters (the neutral view) and answers in each API's real shape, as a JSON body or as
its event stream. A streamed reply first says ``Let me check. `` in a text item/block,
then its calls. Ids: ``resp_<n>``/``msg_<n>``, one per reply. Usage: 100 + 10 per
neutral message input tokens, 5 output tokens.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from context_engine.proxy.demo.mock_upstream import ServerThread
from context_engine.proxy.dialects.anthropic import request as anthropic_adapter
from context_engine.proxy.dialects.recall_wire import tool_name
from context_engine.proxy.dialects.responses import request as responses_adapter
from tests.fakes.recall_upstream import decide
from tests.fakes.upstreams import ANTHROPIC_BOOM, BOOM

LEAD = "Let me check. "


def _sse(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()


def _neutral(body: dict[str, Any], raw: bytes, api: str) -> tuple[str | None, list[dict[str, Any]], int]:
    parse = responses_adapter.parse if api == "responses" else anthropic_adapter.parse
    messages = parse(raw).chat["messages"]
    chat = {"model": body.get("model"), "messages": messages,
            "tools": [{"function": {"name": tool_name(t)}} for t in body.get("tools") or []]}
    text, calls = decide(chat)
    return text, calls, 100 + 10 * len(messages)


def responses_reply(body: dict[str, Any], rid: str, text: str | None, calls: list[dict[str, Any]],
                    prompt: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    usage = {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": prompt + 5}
    items = [{"id": f"fc_{rid}_{k}", "type": "function_call", "status": "completed",
              "call_id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
             for k, c in enumerate(calls)]
    resp: dict[str, Any] = {"id": rid, "object": "response", "created_at": 1, "status": "completed", "error": None,
            "incomplete_details": None, "model": body.get("model"), "output": [], "usage": usage,
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "x_extra": {"kept": True}}
    return resp, items


def _message(rid: str, text: str) -> dict[str, Any]:
    return {"id": f"msg_{rid}", "type": "message", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "annotations": [], "text": text}]}


def responses_stream(resp: dict[str, Any], text: str | None, items: list[dict[str, Any]]) -> bytes:
    seq = itertools.count()
    out: list[bytes] = []

    def ev(kind: str, **data: Any) -> None:
        out.append(_sse(kind, {"type": kind, "sequence_number": next(seq), **data}))

    pending = {**resp, "status": "in_progress", "usage": None}
    ev("response.created", response=pending)
    ev("response.in_progress", response=pending)
    said = LEAD + (text or "")
    msg = _message(resp["id"], said)
    ev("response.output_item.added", output_index=0, item={**msg, "status": "in_progress", "content": []})
    part = {"type": "output_text", "annotations": [], "text": ""}
    ev("response.content_part.added", item_id=msg["id"], output_index=0, content_index=0, part=part)
    for i in range(0, len(said), 40):
        ev("response.output_text.delta", item_id=msg["id"], output_index=0, content_index=0,
           delta=said[i:i + 40])
    ev("response.output_text.done", item_id=msg["id"], output_index=0, content_index=0, text=said)
    ev("response.content_part.done", item_id=msg["id"], output_index=0, content_index=0,
       part={**part, "text": said})
    ev("response.output_item.done", output_index=0, item=msg)
    for n, item in enumerate(items, 1):
        ev("response.output_item.added", output_index=n,
           item={**item, "status": "in_progress", "arguments": ""})
        args = item["arguments"]
        for i in range(0, len(args), 7):
            ev("response.function_call_arguments.delta", item_id=item["id"], output_index=n,
               delta=args[i:i + 7])
        ev("response.function_call_arguments.done", item_id=item["id"], output_index=n, arguments=args)
        ev("response.output_item.done", output_index=n, item=item)
    ev("response.completed", response={**resp, "output": [msg] + items})
    return b"".join(out)


def anthropic_stream(msg: dict[str, Any], text: str | None, blocks: list[dict[str, Any]]) -> bytes:
    out = [_sse("message_start", {"type": "message_start", "message": {
        **msg, "content": [], "stop_reason": None, "usage": {**msg["usage"], "output_tokens": 1}}})]
    said = LEAD + (text or "")
    out.append(_sse("content_block_start", {"type": "content_block_start", "index": 0,
                                            "content_block": {"type": "text", "text": ""}}))
    out.append(_sse("ping", {"type": "ping"}))
    out += [_sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                         "delta": {"type": "text_delta", "text": said[i:i + 40]}})
            for i in range(0, len(said), 40)]
    out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": 0}))
    for n, block in enumerate(blocks, 1):
        out.append(_sse("content_block_start", {"type": "content_block_start", "index": n,
                                                "content_block": {**block, "input": {}}}))
        args = json.dumps(block["input"])
        out += [_sse("content_block_delta", {"type": "content_block_delta", "index": n, "delta": {
            "type": "input_json_delta", "partial_json": args[i:i + 7]}}) for i in range(0, len(args), 7)]
        out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": n}))
    out.append(_sse("message_delta", {"type": "message_delta", "delta": {
        "stop_reason": msg["stop_reason"], "stop_sequence": None}, "usage": {"output_tokens": 5}}))
    out.append(_sse("message_stop", {"type": "message_stop"}))
    return b"".join(out)


class RecallApisUpstream(ServerThread):
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.responses: list[bytes] = []
        ids: Iterator[int] = itertools.count(1)

        def failing(body: dict[str, Any], neutral_last_is_tool: bool) -> bool:
            return body.get("model") == "recall-fail" and neutral_last_is_tool

        async def responses(request: Request) -> Response:
            raw = await request.body()
            body = json.loads(raw)
            self.requests.append(body)
            text, calls, prompt = _neutral(body, raw, "responses")
            last = (body.get("input") or [{}])[-1]
            if failing(body, isinstance(last, dict) and last.get("type") == "function_call_output"):
                return Response(BOOM, status_code=500, media_type="application/json")
            resp, items = responses_reply(body, f"resp_{next(ids)}", text, calls, prompt)
            if body.get("stream"):
                data = responses_stream(resp, text, items)
                self.responses.append(data)
                return Response(data, media_type="text/event-stream")
            resp["output"] = items or [_message(resp["id"], text or "")]
            data = json.dumps(resp).encode()
            self.responses.append(data)
            return Response(data, media_type="application/json")

        async def messages(request: Request) -> Response:
            raw = await request.body()
            body = json.loads(raw)
            self.requests.append(body)
            text, calls, prompt = _neutral(body, raw, "anthropic")
            last = body["messages"][-1]["content"]
            if failing(body, isinstance(last, list) and str(last[0].get("tool_use_id")).startswith("call_r")):
                return Response(ANTHROPIC_BOOM, status_code=500, media_type="application/json")
            blocks = [{"type": "tool_use", "id": c["id"], "name": c["function"]["name"],
                       "input": json.loads(c["function"]["arguments"])} for c in calls]
            msg = {"id": f"msg_{next(ids)}", "type": "message", "role": "assistant",
                   "model": body.get("model"), "content": blocks or [{"type": "text", "text": text or ""}],
                   "stop_reason": "tool_use" if calls else "end_turn", "stop_sequence": None,
                   "usage": {"input_tokens": prompt, "cache_creation_input_tokens": 0,
                             "cache_read_input_tokens": 0, "output_tokens": 5}, "x_extra": {"kept": True}}
            data = anthropic_stream(msg, text, blocks) if body.get("stream") else json.dumps(msg).encode()
            self.responses.append(data)
            return Response(data, media_type="text/event-stream" if body.get("stream") else "application/json")

        super().__init__(Starlette(routes=[Route("/v1/responses", responses, methods=["POST"]),
                                           Route("/v1/messages", messages, methods=["POST"])]))
