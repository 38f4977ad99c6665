"""A real HTTP mock of the OpenAI API on loopback, for the demo, the tests and benchmarks.

It records every request it receives (path, headers, raw body) and answers like the
chat-completions API: plain or streamed (SSE), with a tool call (as deltas when
streamed) when the request offers tools and the last message is a user turn. It
simulates provider prompt caching: ``cached_tokens`` is the longest prefix, in whole
128-token steps from 1024 on, shared with an earlier request's messages (``cache_control``
markers left out: providers key the cache on content).

Models named ``mock-429``, ``mock-500`` and ``mock-slow-<seconds>`` answer with that
error, or after that delay, and the key ``sk-invalid`` gets a 401, so tests can drive
the proxy's error paths.

``/v1/responses`` and ``/v1/messages`` answer as OpenAI's Responses API and Anthropic's
Messages do (``context_engine.proxy.demo.mock_apis``), ``/v1beta/models/{model}:generateContent``
as Gemini does (``mock_gemini``), ``/v1beta/interactions`` as its Interactions API
does (``mock_interactions``). A ``script`` (steps ``{"shell": cmd}`` or
``{"text": ...}``) drives real agents: each request that offers a shell tool gets the
next step, any other request a plain text reply.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse as StarletteJSON
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from context_engine.proxy.demo import mock_apis, mock_gemini, mock_interactions
from context_engine.proxy.demo.mock_apis import next_reply as _next_reply
from context_engine.proxy.demo.server_thread import ServerThread as ServerThread  # re-exported
from context_engine.proxy.dialects.anthropic.request import parse as parse_anthropic
from context_engine.proxy.dialects.responses.request import parse as parse_responses
from context_engine.proxy.engine.prefix import strip_marks
from context_engine.proxy.engine.tokens import TokenCounter


class JSONResponse(StarletteJSON):
    """Starlette's JSON reply, but a lone surrogate the mock echoes (a ``model`` of
    ``"\\ud800"``) goes out as its JSON escape instead of failing to encode."""

    def render(self, content: Any) -> bytes:
        text = json.dumps(content, ensure_ascii=False, allow_nan=False, indent=None,
                          separators=(",", ":"))
        return text.encode("utf-8", "backslashreplace")


@dataclass
class Received:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class MockState:
    received: list[Received] = field(default_factory=list)
    prompts: list[list[int]] = field(default_factory=list)
    counter: TokenCounter = field(default_factory=TokenCounter)
    simulate_cache: bool = True
    script: list[dict[str, Any]] = field(default_factory=list)
    script_pos: int = 0
    max_input_tokens: int = 0  # a longer prompt gets the provider's "too long" 400 (0: no limit)
    usage_scale: float = 1.0  # Responses and Messages report this share of the counted usage


def _cached(state: MockState, tokens: list[int]) -> int:
    best = 0
    for prev in state.prompts[-50:]:
        n = 0
        for a, b in zip(prev, tokens):
            if a != b:
                break
            n += 1
        best = max(best, n)
    state.prompts.append(tokens)
    return 0 if best < 1024 else (best // 128) * 128


@functools.lru_cache(maxsize=20_000)
def _encode(s: str) -> tuple[int, ...]:
    from context_engine.proxy.engine.tokens import get_encoding

    return tuple(get_encoding("o200k_base").encode_ordinary(s))


def _prompt_tokens(state: MockState, body: dict[str, Any], neutral: list[Any] | None = None,
                   items: Any = None) -> tuple[int, int]:
    if not state.simulate_cache:
        return 0, 0
    parts: list[int] = []
    for m in body.get("messages", []) if items is None else items:  # markers are not content
        parts.extend(_encode(json.dumps(strip_marks(m), sort_keys=True, ensure_ascii=False)))
    total = state.counter.request(body.get("messages", []) if neutral is None else neutral,
                                  body.get("tools"))
    return total, min(_cached(state, parts), total)


def _told(state: MockState, prompt: int, cached: int) -> tuple[int, int]:
    return int(prompt * state.usage_scale), int(cached * state.usage_scale)


def _reply(body: dict[str, Any]) -> tuple[str | None, list[dict[str, Any]]]:
    messages = body.get("messages") or [{}]
    last = messages[-1] if isinstance(messages[-1], dict) else {}
    tools = body.get("tools") or []
    if tools and last.get("role") == "user":
        name = tools[0].get("function", {}).get("name", "tool")
        text = str(last.get("content") or "")[:40]
        return None, [{"id": f"call_{len(messages)}", "type": "function",
                       "function": {"name": name, "arguments": json.dumps({"query": text})}}]
    return f"Mock reply to {len(messages)} messages.", []


def _completion(body: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any]:
    text, calls = _reply(body)
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = calls
    return {"id": "chatcmpl-mock", "object": "chat.completion", "created": 1700000000,
            "model": body.get("model", "mock"), "system_fingerprint": "fp_mock",
            "x_mock_extra": {"kept": True},
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": usage}


async def _sse(body: dict[str, Any], usage: dict[str, Any]) -> AsyncIterator[bytes]:
    text, calls = _reply(body)
    base = {"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 1700000000,
            "model": body.get("model", "mock"), "system_fingerprint": "fp_mock"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        data = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return b"data: " + json.dumps(data).encode() + b"\n\n"

    yield chunk({"role": "assistant", "content": "" if text else None})
    if calls:
        call = calls[0]
        yield chunk({"tool_calls": [{"index": 0, "id": call["id"], "type": "function",
                                     "function": {"name": call["function"]["name"], "arguments": ""}}]})
        args = call["function"]["arguments"]
        for i in range(0, len(args), 7):
            yield chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[i:i + 7]}}]})
        yield chunk({}, "tool_calls")
    else:
        for word in (text or "").split(" "):
            yield chunk({"content": word + " "})
            await asyncio.sleep(0)
        yield chunk({}, "stop")
    if (body.get("stream_options") or {}).get("include_usage"):
        yield b"data: " + json.dumps({**base, "choices": [], "usage": usage}).encode() + b"\n\n"
    yield b"data: [DONE]\n\n"


def build_mock_app(state: MockState) -> Starlette:
    async def record(request: Request) -> bytes:
        raw = await request.body()
        state.received.append(Received(request.method, request.url.path, request.url.query,
                                       dict(request.headers), raw))
        return raw

    async def chat(request: Request) -> Response:
        raw = await record(request)
        if request.headers.get("authorization") == "Bearer sk-invalid":
            return JSONResponse({"error": {"message": "Incorrect API key provided.",
                                           "type": "invalid_request_error", "param": None,
                                           "code": "invalid_api_key"}}, status_code=401)
        body = json.loads(raw)
        model = str(body.get("model", ""))
        if model == "mock-429":
            return JSONResponse({"error": {"message": "Rate limit reached", "type": "requests",
                                           "param": None, "code": "rate_limit_exceeded"}},
                                status_code=429, headers={"retry-after": "7", "x-ratelimit-remaining-requests": "0"})
        if model == "mock-500":
            return JSONResponse({"error": {"message": "boom", "type": "server_error",
                                           "param": None, "code": None}}, status_code=500)
        if model.startswith("mock-slow-"):
            await asyncio.sleep(float(model.rsplit("-", 1)[1]))
        prompt, cached = _prompt_tokens(state, body)
        usage = {"prompt_tokens": prompt, "completion_tokens": 9, "total_tokens": prompt + 9,
                 "prompt_tokens_details": {"cached_tokens": cached}}
        if body.get("stream"):
            return StreamingResponse(_sse(body, usage), media_type="text/event-stream",
                                     headers={"x-request-id": "req_mock"})
        return JSONResponse(_completion(body, usage), headers={"x-request-id": "req_mock"})

    async def other(request: Request) -> Response:
        raw = await record(request)
        if request.url.path.endswith("/models"):
            return JSONResponse({"object": "list", "data": [{"id": "gpt-4o", "object": "model",
                                                             "created": 0, "owned_by": "mock"}]})
        return JSONResponse({"echo": {"method": request.method, "path": request.url.path,
                                      "query": request.url.query, "body": raw.decode("utf-8", "replace")}},
                            headers={"x-mock": "other"})

    async def responses(request: Request) -> Response:
        raw = await record(request)
        body = json.loads(raw)
        neutral = parse_responses(raw).chat["messages"]
        items = body.get("input") if isinstance(body.get("input"), list) else [body.get("input")]
        if isinstance(body.get("instructions"), str):  # rendered before the input
            items = [body["instructions"]] + items
        prompt, cached = _prompt_tokens(state, body, neutral, items)
        if 0 < state.max_input_tokens < prompt:
            return JSONResponse(mock_apis.too_long("responses", prompt, state.max_input_tokens), 400)
        reply = _next_reply(state, "responses", body.get("tools") or [], neutral)
        usage = mock_apis.responses_usage(*_told(state, prompt, cached))
        if body.get("stream"):
            return StreamingResponse(mock_apis.responses_stream(body, reply, usage),
                                     media_type="text/event-stream", headers={"x-request-id": "req_mock"})
        return JSONResponse(mock_apis.response_object(body, mock_apis.responses_items(body, reply), usage),
                            headers={"x-request-id": "req_mock"})

    async def messages(request: Request) -> Response:
        raw = await record(request)
        body = json.loads(raw)
        neutral = parse_anthropic(raw).chat["messages"]
        system = [body["system"]] if body.get("system") else []  # rendered before the messages
        prompt, cached = _prompt_tokens(state, body, neutral, system + list(body.get("messages") or []))
        if 0 < state.max_input_tokens < prompt:
            return JSONResponse(mock_apis.too_long("anthropic", prompt, state.max_input_tokens), 400)
        refused = mock_apis.bad_breakpoints(body)
        if refused is not None:
            return JSONResponse(refused, 400)
        reply = _next_reply(state, "anthropic", body.get("tools") or [], neutral)
        usage = mock_apis.anthropic_usage(*_told(state, prompt, cached), b'"cache_control"' in raw,
                                          mock_apis.asks_compaction(body))
        if body.get("stream"):
            return StreamingResponse(mock_apis.anthropic_stream(body, reply, usage),
                                     media_type="text/event-stream", headers={"request-id": "req_mock"})
        return JSONResponse(mock_apis.anthropic_message(body, reply, usage),
                            headers={"request-id": "req_mock"})

    gemini = mock_gemini.handler(state, record, _prompt_tokens)
    interactions = mock_interactions.handler(state, record, _prompt_tokens)
    return Starlette(routes=[
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/responses", responses, methods=["POST"]),
        Route("/v1/messages", messages, methods=["POST"]),
        *(Route(f"/{v}/models/{{model}}:{m}", gemini, methods=["POST"])
          for v in ("v1beta", "v1") for m in ("generateContent", "streamGenerateContent")),
        *(Route(f"/{v}/interactions", interactions, methods=["POST"]) for v in ("v1beta", "v1")),
        Route("/v1/{path:path}", other, methods=["GET", "POST", "PUT", "PATCH", "DELETE"]),
    ])


class MockUpstream(ServerThread):
    def __init__(self, port: int = 0, simulate_cache: bool = True,
                 script: list[dict[str, Any]] | None = None, max_input_tokens: int = 0) -> None:
        self.state = MockState(simulate_cache=simulate_cache, script=list(script or []),
                               max_input_tokens=max_input_tokens)
        super().__init__(build_mock_app(self.state), port)

    @property
    def received(self) -> list[Received]:
        return self.state.received


def main() -> None:
    """``python -m context_engine.proxy.demo.mock_upstream --port N [--plain]``: serve the mock in the foreground."""
    import argparse

    p = argparse.ArgumentParser(description="OpenAI-API mock on 127.0.0.1")
    p.add_argument("--port", type=int, default=8788)
    p.add_argument("--plain", action="store_true", help="no token counting or cache simulation")
    args = p.parse_args()
    state = MockState(simulate_cache=not args.plain)
    state.received = _Discard()  # a long-running mock keeps no history
    uvicorn.run(build_mock_app(state), host="127.0.0.1", port=args.port, log_level="warning",
                access_log=False)


class _Discard(list):  # type: ignore[type-arg]
    def append(self, item: Any) -> None:
        pass


if __name__ == "__main__":
    main()
