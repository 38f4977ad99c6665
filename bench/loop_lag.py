"""Event-loop lag while large requests go through: how long ``/healthz`` takes to answer
while ``--concurrent`` requests of ``--mb`` MB each are parsed, counted, forwarded and
finished. Work done on the event loop shows as lag; work done in threads does not.

Starts a loopback mock upstream and a proxy (rules as ``--rules``, shadow mode by
default, which counts the whole body and estimates the bill), sends the large requests
in rounds, and pings ``/healthz`` every 5 ms meanwhile. Run as
``python3 -m context_engine.bench.loop_lag --mb 4 --concurrent 4 --rounds 3``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time

import httpx

from context_engine.bench.metrics import percentile
from context_engine.proxy.demo.mock_upstream import MockUpstream, ServerThread
from context_engine.proxy.edge.app import create_app
from context_engine.proxy.engine.engine import Engine
from context_engine.proxy.settings import load_settings
from context_engine.proxy.store.stores import MemoryStore


def body(mb: float, i: int) -> bytes:
    turns = []
    size, k = 0, 0
    while size < mb * 1024 * 1024:
        text = f"step {k} of run {i}: " + " ".join(f"word{(k * 7 + j) % 997}" for j in range(400))
        turns.append({"role": "user" if k % 2 == 0 else "assistant", "content": text})
        size += len(text)
        k += 1
    turns.append({"role": "user", "content": "what now?"})
    return json.dumps({"model": "gpt-4o", "messages": turns}).encode()


async def probe(url: str, mb: float, concurrent: int, rounds: int) -> dict[str, object]:
    bodies = [body(mb, i) for i in range(concurrent)]
    lags: list[float] = []
    async with httpx.AsyncClient(timeout=600) as client:
        stop = asyncio.Event()

        async def ping() -> None:
            while not stop.is_set():
                t0 = time.perf_counter()
                await client.get(url + "/healthz")
                lags.append(time.perf_counter() - t0)
                await asyncio.sleep(0.005)

        pinger = asyncio.create_task(ping())
        t0 = time.perf_counter()
        for _ in range(rounds):
            rs = await asyncio.gather(*(client.post(url + "/v1/chat/completions", content=b,
                                                    headers={"authorization": "Bearer k",
                                                             "content-type": "application/json"})
                                        for b in bodies))
            assert all(r.status_code == 200 for r in rs), [r.status_code for r in rs]
        elapsed = time.perf_counter() - t0
        stop.set()
        await pinger
    lags.sort()
    return {"mb": mb, "concurrent": concurrent, "rounds": rounds, "seconds": round(elapsed, 2),
            "healthz_ms_p50": round(statistics.median(lags) * 1000, 1),
            "healthz_ms_p99": round((percentile(lags, 99) or 0.0) * 1000, 1),
            "healthz_ms_max": round(lags[-1] * 1000, 1), "pings": len(lags)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=float, default=4.0)
    parser.add_argument("--concurrent", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rules", default="")
    parser.add_argument("--mode", default="shadow")
    args = parser.parse_args()
    with MockUpstream() as mock, tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(flags={"rules": args.rules, "store": "memory://", "mode": args.mode,
                                        "ledger": os.path.join(tmp, "l.db"), "upstream": mock.url + "/v1"},
                                 env={}, config_path=os.devnull)
        app = create_app(settings, engine=Engine(settings, store=MemoryStore()))
        with ServerThread(app) as server:
            print(json.dumps(asyncio.run(probe(server.url, args.mb, args.concurrent, args.rounds)), indent=2))


if __name__ == "__main__":
    main()
