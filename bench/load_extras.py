"""What ``bench/load.py`` can add to its sessions: bigger tool results, long streams and
hostile keyless requests running beside them, and the proxy's RSS trend.

- ``--tool-result-kb N``: every tool result of the replayed cases grows to N KB of text
  unique to its session and replay (no two sessions share a stored original);
- ``--long-streams N --stream-chunks C --stream-seconds S``: N callers each stream replies
  of C one-character deltas back to back while the sessions run; the loopback upstream
  writes each delta on its own, spread over S seconds (0: as fast as it can, which
  saturates a 2-core machine's CPU with the floor alone);
- ``--hostile-rps R``: R requests a second with no API key (the upstream answers 401) whose
  bodies are the worst inputs of ``context_engine.bench.hostile``.

The streams and hostile callers run in their own process (``python3 -m
context_engine.bench.load_extras --url …``), so their client work never delays the
sessions' client; it stops on SIGTERM and prints what it did as one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import subprocess
import sys
import time
from typing import Any

import httpx

from context_engine.bench.hostile import hostile_bodies
from context_engine.bench.metrics import percentile

WORDS = ("alpha beta gamma delta epsilon zeta theta lambda sigma omega config value error "
         "warning handler request response session token buffer stream cache index query "
         "result record field table column module function class method return import").split()


def pad_text(text: str, kb: int, tag: str) -> str:
    """``text`` grown to ``kb`` KB with log-like lines that name ``tag`` (deterministic)."""
    rng = random.Random(tag)
    lines, size = [text], len(text)
    n = 0
    while size < kb * 1024:
        line = f"{tag}:{n}: " + " ".join(rng.choices(WORDS, k=12))
        lines.append(line)
        size += len(line) + 1
        n += 1
    return "\n".join(lines)[: kb * 1024]


def pad_tool_results(messages: list[dict[str, Any]], kb: int, tag: str) -> list[dict[str, Any]]:
    """The messages with every string tool result padded to ``kb`` KB (the rest untouched)."""
    if kb <= 0:
        return messages
    return [{**m, "content": pad_text(m["content"], kb, f"{tag}-{i}")}
            if m.get("role") == "tool" and isinstance(m.get("content"), str) else m
            for i, m in enumerate(messages)]


def rss_trend(samples: list[tuple[float, float]]) -> dict[str, float | None]:
    """Least-squares slope (MB a minute) of RSS after the first tenth of the samples (warm-up),
    and the mean of the first and last quarter of those."""
    tail = samples[len(samples) // 10:]
    if len(tail) < 2:
        return {"mb_per_min": None, "first_quarter_mb": None, "last_quarter_mb": None}
    ts, ms = [t for t, _ in tail], [m for _, m in tail]
    t_mean, m_mean = sum(ts) / len(ts), sum(ms) / len(ms)
    var = sum((t - t_mean) ** 2 for t in ts)
    slope = sum((t - t_mean) * (m - m_mean) for t, m in tail) / var if var else 0.0
    q = max(1, len(ms) // 4)
    return {"mb_per_min": round(slope * 60, 2), "first_quarter_mb": round(sum(ms[:q]) / q, 1),
            "last_quarter_mb": round(sum(ms[-q:]) / q, 1)}


def extras_wanted(args: argparse.Namespace) -> bool:
    return bool(args.long_streams or args.hostile_rps)


def extras_label(args: argparse.Namespace) -> str:
    return "".join(["+streams" if args.long_streams else "", "+hostile" if args.hostile_rps else ""])


def plan(args: argparse.Namespace) -> list[tuple[str, str | None, bool]]:
    """The phases of a round: (name, rules, with the extras)."""
    rules = {"floor": None, "passthrough": "", "proxy": args.rules}
    if args.phases:
        names = args.phases.split(",")
        if not set(names) <= set(rules):
            raise SystemExit(f"--phases: expected names from {', '.join(rules)}, got {args.phases!r}")
    elif args.no_floor:
        names = ["proxy"]
    elif args.cold:  # the floor cannot hold a session; the passthrough is the cold floor
        names = ["passthrough", "proxy"]
    else:
        names = ["floor", "passthrough", "proxy"]
    if not extras_wanted(args):
        return [(n, rules[n], False) for n in names]
    label = extras_label(args)
    kinds = [True] if args.extras_only else [False, True]
    return [(n + label if on else n, rules[n], on) for n in names for on in kinds]


def start_extras(base: str, args: argparse.Namespace, env: dict[str, str]) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "context_engine.bench.load_extras", "--url", base,
           "--long-streams", str(args.long_streams), "--stream-chunks", str(args.stream_chunks),
           "--stream-seconds", str(args.stream_seconds),
           "--hostile-rps", str(args.hostile_rps), "--hostile-scale", str(args.hostile_scale)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE)


def stop_extras(proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    lines = out.decode().strip().splitlines()
    return json.loads(lines[-1]) if lines else {"error": f"no report (exit {proc.returncode})"}


async def long_stream(client: httpx.AsyncClient, url: str, chunks: int, seconds: float,
                      stop: asyncio.Event, done: list[dict[str, Any]]) -> None:
    body = {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "write it all"}]}
    headers = {"authorization": "Bearer load-test", "x-mock-chunks": str(chunks),
               "x-mock-stream-s": str(seconds)}
    while not stop.is_set():
        t0, events, status, error = time.perf_counter(), 0, None, ""
        try:
            async with client.stream("POST", url + "/v1/chat/completions", json=body,
                                     headers=headers) as r:
                status = r.status_code
                async for line in r.aiter_lines():
                    events += line.startswith("data:")
        except httpx.HTTPError as exc:
            error = type(exc).__name__
        if stop.is_set() and error:
            return  # cut by the end of the phase
        done.append({"s": time.perf_counter() - t0, "events": events, "status": status, "error": error})


async def hostile(client: httpx.AsyncClient, url: str, rps: float, scale: float, stop: asyncio.Event,
                  done: list[dict[str, Any]]) -> None:
    bodies = hostile_bodies(scale)
    k = 0
    tasks: set[asyncio.Task[None]] = set()

    async def one(name: str, path: str, raw: bytes) -> None:
        t0, status, error = time.perf_counter(), None, ""
        try:
            r = await client.post(url + path, content=raw, headers={"content-type": "application/json"})
            status = r.status_code
        except httpx.HTTPError as exc:
            error = type(exc).__name__
        done.append({"kind": name, "s": time.perf_counter() - t0, "status": status, "error": error})

    while not stop.is_set():  # one every 1/rps seconds, whether or not the last one is done
        name, path, raw = bodies[k % len(bodies)]
        task = asyncio.ensure_future(one(name, path, raw))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        k += 1
        try:
            await asyncio.wait_for(stop.wait(), 1 / rps)
        except TimeoutError:
            pass
    await asyncio.gather(*tasks, return_exceptions=True)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    streams: list[dict[str, Any]] = []
    sent: list[dict[str, Any]] = []
    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=100)) as client:
        jobs = [long_stream(client, args.url, args.stream_chunks, args.stream_seconds, stop, streams)
                for _ in range(args.long_streams)]
        if args.hostile_rps:
            jobs.append(hostile(client, args.url, args.hostile_rps, args.hostile_scale, stop, sent))
        await asyncio.gather(*jobs)
    secs, hs = [s["s"] for s in streams], [h["s"] for h in sent]
    return {"streams_done": len(streams),
            "stream_s": {"p50": _r(percentile(secs, 50)), "max": _r(max(secs, default=None))},
            "stream_events_min": min((s["events"] for s in streams), default=None),
            "stream_errors": sorted({f"{s['status']}/{s['error']}" for s in streams
                                     if s["error"] or s["status"] != 200}),
            "hostile_sent": len(sent),
            "hostile_statuses": sorted({f"{h['kind']}:{h['status']}{h['error']}" for h in sent}),
            "hostile_s": {"p50": _r(percentile(hs, 50)), "max": _r(max(hs, default=None))}}


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True, help="the proxy's base URL")
    p.add_argument("--long-streams", type=int, default=0)
    p.add_argument("--stream-chunks", type=int, default=20_000)
    p.add_argument("--stream-seconds", type=float, default=20.0)
    p.add_argument("--hostile-rps", type=float, default=0.0)
    p.add_argument("--hostile-scale", type=float, default=1.0)
    args = p.parse_args()
    print(json.dumps(asyncio.run(run(args))), flush=True)


if __name__ == "__main__":
    main()
