"""A loopback chat-completions upstream that calls ``context_recall`` like a model would.

The model name picks the behaviour (when the request offers ``context_recall``):

- ``recall-id``: call it with the first ``orig:<id>`` marker in the request; once a tool
  result is the last message, answer ``I read: <that result>``.
- ``recall-turn``: call it with the first turn a ``[context-engine:recall]`` line names.
- ``recall-unknown``: call it with an id nobody stored.
- ``recall-other:<id>``: call it with the given id (another caller's).
- ``recall-mixed``: call ``context_recall`` and the client's ``lookup`` in one reply; after
  the recall result, call ``lookup`` alone.
- ``recall-loop``: call it whenever it is offered; else say how many results came back.
- ``recall-many:<n>``: call it ``n`` times in one reply, each a query, then an id range.
- ``recall-fail``: like ``recall-id``, but the follow-up answers 500.
- ``lookup-then-recall``: call the client's ``lookup``, then ``context_recall``, in one reply.
- ``recall-huge``: call ``context_recall`` with a 5,000-character query.
- ``lookup-gated``: call ``lookup``; streamed, the reply stops after the call's first
  chunk until ``gate`` is set (10 s at most; ``gate_timed_out`` says if it ran out).

A request header ``x-test-encoding`` (``gzip``, ``deflate``: raw deflate, or ``br``: raw
deflate bytes labelled br, an encoding the proxy cannot read) compresses the reply that
way whatever the request accepts; ``x-test-encoding-follow`` does so only for a
follow-up (a request ending with a tool result).

Every request body and every response body is recorded, and each request's
``accept-encoding`` in ``accepted``. Usage: 100 + 10 per message
input tokens, 5 output tokens, so sums over rounds are checkable.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import threading
import zlib
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from context_engine.proxy.demo.mock_upstream import ServerThread
from context_engine.proxy.engine.originals import REFERENCE
from tests.fakes.upstreams import BOOM, completion

TURN = re.compile(r"\[context-engine:recall\] turns from #(\d+)")


def _offered(body: dict[str, Any]) -> bool:
    return any((t.get("function") or {}).get("name") == "context_recall" for t in body.get("tools") or [])


def _call(cid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def decide(body: dict[str, Any]) -> tuple[str | None, list[dict[str, Any]]]:
    """The reply: text, or tool calls."""
    model, messages = str(body.get("model")), body["messages"]
    last = messages[-1]
    text = json.dumps(messages)
    results = [m for m in messages if m.get("role") == "tool" and str(m.get("tool_call_id", "")).startswith("call_r")]
    if model == "recall-loop":
        if _offered(body):
            return None, [_call(f"call_r{len(results)}", "context_recall", {"query": "anything"})]
        return f"gave up after {len(results)} recall results", []
    if last.get("role") == "tool":
        if model == "recall-mixed":
            return None, [_call("call_lookup2", "lookup", {"q": "x"})]
        return "I read: " + str(last.get("content")), []
    if not _offered(body):
        return "no recall offered", []
    if model in ("recall-id", "recall-fail"):
        return None, [_call("call_r1", "context_recall", {"id": "orig:" + REFERENCE.findall(text)[0]})]
    if model == "recall-turn":
        return None, [_call("call_r1", "context_recall", {"id": "#" + TURN.findall(text)[0]})]
    if model == "recall-unknown":
        return None, [_call("call_r1", "context_recall", {"id": "orig:000000000000"})]
    if model.startswith("recall-many:"):
        n = int(model.split(":", 1)[1])
        return None, [_call(f"call_r{k}", "context_recall",
                            {"query": "sensor read units"} if k % 2 else {"id": "#0-#4"})
                      for k in range(n)]
    if model.startswith("recall-other:"):
        return None, [_call("call_r1", "context_recall", {"id": model.split(":", 1)[1]})]
    if model == "recall-mixed":
        return None, [_call("call_r1", "context_recall", {"id": "orig:" + REFERENCE.findall(text)[0]}),
                      _call("call_lookup1", "lookup", {"q": "y"})]
    if model == "lookup-then-recall":
        return None, [_call("call_lookup1", "lookup", {"q": "y"}),
                      _call("call_r1", "context_recall", {"id": "orig:" + REFERENCE.findall(text)[0]})]
    if model == "recall-huge":
        return None, [_call("call_r1", "context_recall", {"query": "sensor " * 800})]
    if model == "lookup-gated":
        return None, [_call("call_lookup1", "lookup", {"q": "y"})]
    return "plain reply", []


def _usage(body: dict[str, Any]) -> dict[str, Any]:
    prompt = 100 + 10 * len(body["messages"])
    return {"prompt_tokens": prompt, "completion_tokens": 5, "total_tokens": prompt + 5,
            "prompt_tokens_details": {"cached_tokens": 0}}


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    obj = {"id": "chatcmpl-r", "object": "chat.completion.chunk", "created": 1, "model": "m",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def stream_bytes(body: dict[str, Any], text: str | None, calls: list[dict[str, Any]]) -> bytes:
    out = [_chunk({"role": "assistant", "content": ""}), _chunk({"content": "Let me check. "})]
    if text is not None:
        out += [_chunk({"content": text[i:i + 40]}) for i in range(0, len(text), 40)]
    for k, c in enumerate(calls):
        args = c["function"]["arguments"]
        out.append(_chunk({"tool_calls": [{"index": k, "id": c["id"], "type": "function",
                                           "function": {"name": c["function"]["name"], "arguments": ""}}]}))
        out += [_chunk({"tool_calls": [{"index": k, "function": {"arguments": args[i:i + 7]}}]})
                for i in range(0, len(args), 7)]
    out.append(_chunk({}, "tool_calls" if calls else "stop"))
    if (body.get("stream_options") or {}).get("include_usage"):
        out.append(b"data: " + json.dumps({"id": "chatcmpl-r", "object": "chat.completion.chunk",
                                            "choices": [], "usage": _usage(body)}).encode() + b"\n\n")
    out.append(b"data: [DONE]\n\n")
    return b"".join(out)


def _compress(data: bytes, encoding: str) -> bytes:
    if encoding == "gzip":
        return gzip.compress(data)
    packer = zlib.compressobj(wbits=-15)  # raw deflate, no zlib header
    return packer.compress(data) + packer.flush()


class RecallUpstream(ServerThread):
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.responses: list[bytes] = []
        self.gate = threading.Event()
        self.gate_timed_out = False
        self.accepted: list[str] = []

        async def gated(raw: bytes) -> AsyncIterator[bytes]:
            cut = raw.index(b'"tool_calls"')
            cut = raw.index(b"\n\n", cut) + 2
            yield raw[:cut]
            for _ in range(1000):
                if self.gate.is_set():
                    break
                await asyncio.sleep(0.01)
            else:
                self.gate_timed_out = True
            yield raw[cut:]

        async def chat(request: Request) -> Response:
            body = json.loads(await request.body())
            self.requests.append(body)
            self.accepted.append(request.headers.get("accept-encoding", ""))
            follow = body["messages"][-1].get("role") == "tool"
            encoding = request.headers.get("x-test-encoding-follow" if follow else "x-test-encoding")
            response = await reply(request, body)
            if encoding:
                response.body = _compress(bytes(response.body), encoding)
                response.headers["content-encoding"] = encoding
                response.headers["content-length"] = str(len(response.body))
            return response

        async def reply(request: Request, body: dict[str, Any]) -> Response:
            if body.get("model") == "recall-fail" and body["messages"][-1].get("role") == "tool":
                return Response(BOOM, status_code=500, media_type="application/json")
            text, calls = decide(body)
            if body.get("stream"):
                raw = stream_bytes(body, text, calls)
                self.responses.append(raw)
                if body.get("model") == "lookup-gated":
                    return StreamingResponse(gated(raw), media_type="text/event-stream")
                return Response(raw, media_type="text/event-stream")
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if calls:
                message["tool_calls"] = calls
            raw = json.dumps(completion(message, body.get("model"), _usage(body),
                                        "tool_calls" if calls else "stop", id="chatcmpl-r",
                                        created=1, x_extra={"kept": True})).encode()
            self.responses.append(raw)
            return Response(raw, media_type="application/json")

        super().__init__(Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])]))
