"""The loopback upstream of ``bench/load.py``: answers chat completions after ``--delay``
seconds, plain or streamed (SSE), and injects faults at given rates.

Faults (``--faults reset=0.05,error=0.05,slow=0.02``): ``reset`` sends the status line,
headers and part of the body, then drops the connection (no terminating chunk);
``error`` answers 500 in the API's error shape; ``slow`` answers after ``SLOW_FACTOR``
times the delay. Every response says which fault it carries in ``x-mock-fault``, so the
client can tell a fault the upstream made from one the proxy made, and ``x-mock-ms`` how
long the upstream held the request (the sleep's real length, not the nominal delay).

A request with neither ``Authorization`` nor ``x-api-key`` is refused at once with 401, as a
real API would (chat completions and Anthropic Messages, each in its error shape). A streamed
chat request with ``x-mock-chunks: N`` gets N one-character deltas, each written on its own,
spread over ``x-mock-stream-s`` seconds (0 or absent: as fast as the loop writes them).
Run as
``python3 -m context_engine.bench.load_mock --port P [--delay 1] [--faults …] [--seed 1]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

FAULTS = ("reset", "error", "slow")
SLOW_FACTOR = 5.0
ANSWER = "Sure: here is what I found, step by step, in a few words for the load test."


def parse_faults(spec: str) -> dict[str, float]:
    """``reset=0.05,error=0.05`` → rates; unknown names or bad rates raise ValueError."""
    rates: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, value = part.partition("=")
        if name not in FAULTS or not 0.0 <= float(value) <= 1.0:
            raise ValueError(f"bad fault {part!r}: expected {', '.join(FAULTS)} with a rate 0-1")
        rates[name] = float(value)
    if sum(rates.values()) > 1.0:
        raise ValueError("fault rates add up to more than 1")
    return rates


class Chooser:
    def __init__(self, rates: dict[str, float], seed: int) -> None:
        self.rates, self.rng = rates, random.Random(seed)

    def __call__(self) -> str:
        x, acc = self.rng.random(), 0.0
        for name, rate in self.rates.items():
            acc += rate
            if x < acc:
                return name
        return "none"


def _completion(model: str) -> dict[str, Any]:
    return {"id": "chatcmpl-load", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": ANSWER},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}}


def _chunks(model: str) -> list[bytes]:
    words = ANSWER.split(" ")
    out = []
    for i in range(0, len(words), 4):
        delta = {"content": " ".join(words[i:i + 4]) + " "}
        out.append({"id": "chatcmpl-load", "object": "chat.completion.chunk", "created": 0,
                    "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
    out.append({"id": "chatcmpl-load", "object": "chat.completion.chunk", "created": 0, "model": model,
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}})
    return [f"data: {json.dumps(c)}\n\n".encode() for c in out] + [b"data: [DONE]\n\n"]


def _long(model: str, n: int) -> list[bytes]:
    def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return b"data: " + json.dumps({"id": "chatcmpl-long", "object": "chat.completion.chunk", "created": 0,
                                       "model": model, "choices": [{"index": 0, "delta": delta,
                                                                    "finish_reason": finish}]}).encode() + b"\n\n"
    one = event({"content": "x"})
    return [event({"role": "assistant", "content": ""}), *[one] * n, event({}, "stop"), b"data: [DONE]\n\n"]


def _keyless(request: Request) -> Response | None:
    """The upstream's 401 for a request that carries no key."""
    if request.headers.get("authorization") or request.headers.get("x-api-key"):
        return None
    if request.url.path.endswith("/messages"):
        body: dict[str, Any] = {"type": "error", "error": {"type": "authentication_error",
                                                          "message": "x-api-key header is required"}}
    else:
        body = {"error": {"message": "You didn't provide an API key.", "type": "invalid_request_error",
                          "param": None, "code": None}}
    return JSONResponse(body, 401, headers={"x-mock-fault": "keyless", "x-mock-ms": "0"})


async def _paced(parts: list[bytes], seconds: float) -> AsyncIterator[bytes]:
    t0, n = time.perf_counter(), len(parts)
    for i, part in enumerate(parts):
        yield part
        await asyncio.sleep(max(0.0, t0 + seconds * (i + 1) / n - time.perf_counter()))


class Reset(Exception):
    """Raised inside a response body: uvicorn drops the connection mid-body."""


async def _body(parts: list[bytes], reset: bool) -> AsyncIterator[bytes]:
    for i, part in enumerate(parts):
        if reset and i >= max(1, len(parts) // 2):
            raise Reset("injected reset")
        yield part
        await asyncio.sleep(0)


def build_app(delay: float, choose: Chooser) -> Starlette:
    async def chat(request: Request) -> Response:
        t0 = time.perf_counter()
        raw = await request.body()
        refused = _keyless(request)
        if refused is not None:
            return refused
        body = json.loads(raw)
        fault = choose()
        await asyncio.sleep(delay * (SLOW_FACTOR if fault == "slow" else 1.0))
        # what the upstream itself took, timer overshoot included (a VM's idle vCPU can
        # oversleep by tens of ms): the client subtracts this, not the nominal delay
        headers = {"x-mock-fault": fault, "x-mock-ms": f"{(time.perf_counter() - t0) * 1000:.3f}"}
        model = str(body.get("model") or "mock")
        if fault == "error":
            return JSONResponse({"error": {"message": "injected upstream error", "type": "server_error",
                                           "param": None, "code": None}}, 500, headers=headers)
        if body.get("stream") is True and request.headers.get("x-mock-chunks"):
            parts = _long(model, int(request.headers["x-mock-chunks"]))
            return StreamingResponse(_paced(parts, float(request.headers.get("x-mock-stream-s") or 0)),
                                     media_type="text/event-stream", headers=headers)
        if body.get("stream") is True:
            return StreamingResponse(_body(_chunks(model), fault == "reset"),
                                     media_type="text/event-stream", headers=headers)
        if fault == "reset":
            raw = json.dumps(_completion(model)).encode()
            return StreamingResponse(_body([raw[:40], raw[40:80], raw[80:]], True),
                                     media_type="application/json", headers=headers)
        return JSONResponse(_completion(model), headers=headers)

    async def messages(request: Request) -> Response:
        await request.body()
        refused = _keyless(request)
        if refused is not None:
            return refused
        await asyncio.sleep(delay)
        return JSONResponse({"id": "msg_load", "type": "message", "role": "assistant", "model": "mock",
                             "content": [{"type": "text", "text": ANSWER}], "stop_reason": "end_turn",
                             "usage": {"input_tokens": 100, "output_tokens": 20}},
                            headers={"x-mock-fault": "none", "x-mock-ms": f"{delay * 1000:.3f}"})

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]),
                             Route("/v1/messages", messages, methods=["POST"])])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--delay", type=float, default=1.0)
    p.add_argument("--faults", default="")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    app = build_app(a.delay, Chooser(parse_faults(a.faults), a.seed))
    uvicorn.run(app, host="127.0.0.1", port=a.port, log_level="critical", access_log=False)


if __name__ == "__main__":
    main()
