"""The client side of ``bench/load.py``: sessions replaying real cases turn by turn (each
with its own ``X-Session-Id``, starts spread over one upstream delay), and cold
300-turn requests beside bystander sessions. Each request's outcome keeps what the
upstream said of it (its fault, how long it held the request)."""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass
from typing import Any

import httpx

from context_engine.bench.cases import load_cases, request_points, resolve_file
from context_engine.bench.load_extras import pad_tool_results
from context_engine.bench.load_mock import SLOW_FACTOR


@dataclass
class Outcome:
    session: str
    sent: float  # seconds since the phase began
    seconds: float
    fault: str  # the upstream's fault ("none", "slow", "error", "reset"), "?" when unknown
    upstream_s: float | None  # how long the upstream held the request (its x-mock-ms)
    status: int | None
    error: str  # the client's exception, if any



async def send(client: httpx.AsyncClient, url: str, body: dict[str, Any], session: str,
               t0: float) -> Outcome:
    sent = time.perf_counter()
    fault, status, error, held = "?", None, "", None
    headers = {"x-session-id": session, "authorization": "Bearer load-test"}
    try:
        async with client.stream("POST", url, json=body, headers=headers) as r:
            fault, status = r.headers.get("x-mock-fault", "?"), r.status_code
            held = float(r.headers["x-mock-ms"]) / 1000 if "x-mock-ms" in r.headers else None
            async for _ in r.aiter_raw():
                pass
    except httpx.HTTPError as exc:
        error = type(exc).__name__
    return Outcome(session, sent - t0, time.perf_counter() - sent, fault, held, status, error)


def requests_of(case: Any, skip: int, turns: int,
                messages: list[dict[str, Any]] | None = None) -> list[list[dict[str, Any]]]:
    """The requests an agent sent replaying ``case`` (its ``messages``, if given, instead)."""
    whole = case.messages if messages is None else messages
    points = request_points(whole)[skip:]
    points = points[:turns] if turns else points
    return [whole[: i + 1] for i in points]


async def run_sessions(url: str, cases: list[Any], args: argparse.Namespace) -> tuple[list[Outcome], float]:
    t0 = time.perf_counter()
    out: list[Outcome] = []
    limits = httpx.Limits(max_connections=args.sessions * 2, max_keepalive_connections=args.sessions * 2)

    async def session(k: int) -> None:
        if not args.no_stagger:  # agents do not all start in the same millisecond
            await asyncio.sleep(k * args.delay / args.sessions)
        async with httpx.AsyncClient(timeout=args.delay * SLOW_FACTOR + 120, limits=limits) as client:
            rep = 0
            while True:
                case = cases[(k + rep * args.sessions) % len(cases)]
                whole = pad_tool_results(case.messages, args.tool_result_kb, f"s{k}r{rep}")
                for msgs in requests_of(case, args.skip, args.turns, whole):
                    body = {"model": "gpt-4o", "messages": msgs, "stream": args.stream}
                    if case.tools:
                        body["tools"] = case.tools
                    out.append(await send(client, url, body, f"load-{k}-{rep}-{case.id}", t0))
                    if args.duration and time.perf_counter() - t0 > args.duration:
                        return
                rep += 1
                if not args.duration:
                    return

    await asyncio.gather(*(session(k) for k in range(args.sessions)))
    return out, time.perf_counter() - t0


async def run_cold(url: str, args: argparse.Namespace) -> tuple[list[Outcome], float]:
    """``--cold`` conversations, each one request with 300+ old turns in a new session,
    while five bystander sessions send short requests back to back."""
    convs = load_cases(resolve_file("locomo"), dedupe=True)[: args.cold]
    traces = load_cases(resolve_file("agent_traces"))[:20]
    t0 = time.perf_counter()
    out: list[Outcome] = []
    stop = asyncio.Event()

    async def bystander(k: int) -> None:
        async with httpx.AsyncClient(timeout=120) as client:
            i = 0
            while not stop.is_set():
                msgs = requests_of(traces[(k + i) % len(traces)], 0, 1)[0]
                out.append(await send(client, url, {"model": "gpt-4o", "messages": msgs},
                                      f"bystander-{k}-{i}", t0))
                i += 1

    tasks = [asyncio.ensure_future(bystander(k)) for k in range(5)]
    await asyncio.sleep(3 * args.delay)  # the bystanders are in flight
    async with httpx.AsyncClient(timeout=300) as client:
        for c, case in enumerate(convs):
            i = next(p for p in request_points(case.messages) if p >= 300)
            out.append(await send(client, url, {"model": "gpt-4o", "messages": case.messages[: i + 1]},
                                  f"cold-{c}", t0))
            await asyncio.sleep(args.delay)
    stop.set()
    await asyncio.gather(*tasks)
    return out, time.perf_counter() - t0
