"""A long stream of tiny deltas through the proxy: its cost, and what it costs others.

Starts a streaming upstream on loopback (its own process: every reply is ``--deltas``
one-character content events, each written on its own) and the proxy (passthrough, its
own process). Times one streamed reply read directly and through the proxy; then,
while a second such stream runs through the proxy, times a small non-streamed request
from another caller, and the same request with no stream running. ``--runs N`` repeats
that N times with the same servers. Run by hand; ``--json OUT`` writes the report (with
its command, date, load and ``--note``) that ``docs/benchmarks.md`` is generated from:

    python3 bench/stream_deltas.py [--deltas 20000] [--runs 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from typing import Any

import httpx

from context_engine.bench.fleet import free_port, wait_up
from context_engine.bench.run_record import about, emit
from context_engine.proxy.settings import Settings

UPSTREAM = r'''
import json, sys, uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route
N = int(sys.argv[2])
def event(delta, finish=None):
    data = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(data).encode() + b"\n\n"
async def chat(request):
    body = await request.json()
    if not body.get("stream"):
        return JSONResponse({"id": "c", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}})
    async def gen():
        yield event({"role": "assistant", "content": ""})
        for _ in range(N):
            yield event({"content": "x"})
        yield event({}, "stop")
        yield b"data: [DONE]\n\n"
    return StreamingResponse(gen(), media_type="text/event-stream")
app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
'''

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def read_stream(url: str) -> tuple[float, int]:
    start, events = time.perf_counter(), 0
    with httpx.stream("POST", url + "/chat/completions", json={**BODY, "stream": True},
                      timeout=300) as r:
        for line in r.iter_lines():
            events += line.startswith("data:")
    return time.perf_counter() - start, events


def one_run(upstream: str, proxy: str) -> dict[str, Any]:
    """One stream read directly, one through the proxy, a small request from another caller
    while a third stream runs through the proxy, and the same request with none running."""
    direct, n_direct = read_stream(upstream)
    through, n_through = read_stream(proxy)
    waits: list[float] = []

    def other_caller() -> None:
        time.sleep(0.2)  # the stream is under way
        start = time.perf_counter()
        httpx.post(proxy + "/chat/completions", json=BODY, timeout=60)
        waits.append(time.perf_counter() - start)

    t = threading.Thread(target=other_caller)
    t.start()
    read_stream(proxy)
    t.join()
    idle_start = time.perf_counter()
    httpx.post(proxy + "/chat/completions", json=BODY, timeout=60)
    idle = time.perf_counter() - idle_start
    return {"direct_s": round(direct, 3), "through_proxy_s": round(through, 3),
            "events": [n_direct, n_through], "other_caller_during_stream_s": round(waits[0], 3),
            "other_caller_idle_s": round(idle, 3)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deltas", type=int, default=20_000)
    ap.add_argument("--runs", type=int, default=1, help="measurements with the same servers")
    ap.add_argument("--coalesce-ms", type=float, default=None,
                    help="the proxy's stream_coalesce_ms (default: its configured default)")
    ap.add_argument("--json", default=None, metavar="OUT", help="also write the report here")
    ap.add_argument("--note", default="", help="a line on the conditions, kept in the report")
    args = ap.parse_args(argv)
    started = about("python3 bench/stream_deltas.py", sys.argv[1:] if argv is None else argv, args.note)
    up_port, proxy_port = free_port(), free_port()
    coalesce = Settings().stream_coalesce_ms if args.coalesce_ms is None else args.coalesce_ms
    env = {**os.environ, "CONTEXT_ENGINE_LOG_LEVEL": "warning",
           "CONTEXT_ENGINE_STREAM_COALESCE_MS": str(coalesce)}
    procs: list[Any] = [subprocess.Popen([sys.executable, "-c", UPSTREAM, str(up_port), str(args.deltas)])]
    upstream = f"http://127.0.0.1:{up_port}/v1"
    procs.append(subprocess.Popen(
        [sys.executable, "-m", "context_engine.proxy.cli", "serve", "--port", str(proxy_port),
         "--upstream", upstream, "--rules", "", "--store", "memory://", "--config", os.devnull,
         "--ledger", f"/tmp/context-engine-stream-deltas-{proxy_port}.db"], env=env))
    proxy = f"http://127.0.0.1:{proxy_port}/v1"
    try:
        wait_up(f"http://127.0.0.1:{proxy_port}/healthz", proc=procs[1])
        for _ in range(50):
            try:
                httpx.post(upstream + "/chat/completions", json=BODY)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        read_stream(proxy)  # warm up
        report = {**started, "deltas": args.deltas, "stream_coalesce_ms": coalesce,
                  "runs": [one_run(upstream, proxy) for _ in range(args.runs)]}
        emit(report, args.json)
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)


if __name__ == "__main__":
    main()
