"""Concurrent sessions through the real server, beside a passthrough floor, in one run.

Starts a loopback upstream (``context_engine.bench.load_mock``: ``--delay`` seconds per reply, optional
faults) and, one after the other, two proxies as subprocesses (``python -m context_engine.proxy.cli
serve``): the floor (``context_engine.bench.floor_proxy``), passthrough (``--rules ""``: the same server
with no rule) and the proxy with ``--rules`` (default: the configured rules). Each of ``--sessions`` sessions replays real
cases turn by turn (every request point, as the agent sent it), its own ``X-Session-Id``.
Added latency = the client's round trip minus the time the upstream held the request (its
``x-mock-ms``; on this VM a 1 s sleep can overshoot by tens of ms), for requests the
upstream answered without a fault. The floor is ``context_engine.bench.floor_proxy``, the smallest
starlette+httpx proxy; ``passthrough`` is ``serve`` with no rule. Reports p50/p95/max added, throughput, errors the proxy
caused, faults surfaced to or hidden from clients, ledger rows against requests, the
rules' deadline and shed counters, and the proxy's RSS over time. Run by hand:

    python3 bench/load.py --sessions 30                          # dev traces, 1 s upstream
    python3 bench/load.py --data locomo --sessions 10 --skip 60 --turns 40
    python3 bench/load.py --cold 5                               # cold 300-turn requests
    python3 bench/load.py --sessions 50 --stream --faults reset=0.05,error=0.05,slow=0.02 --duration 120
    python3 bench/load.py --phases floor,proxy --rounds 3 --long-streams 5 --stream-chunks 20000 --stream-seconds 20
    python3 bench/load.py --phases proxy --rounds 3 --hostile-rps 1   # each phase without, then with
    python3 bench/load.py --phases proxy --tool-result-kb 100 --duration 1200 --rss-every 5

With ``--long-streams`` or ``--hostile-rps`` each phase runs twice a round, without and then with
the extras (``proxy+streams``…; ``context_engine.bench.load_extras``), unless ``--extras-only``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from context_engine.bench.cases import load_cases, resolve_file
from context_engine.bench.cli import without_outputs
from context_engine.bench.fleet import free_port, wait_up
from context_engine.bench.load_client import Outcome, requests_of, run_cold, run_sessions, send
from context_engine.bench.load_extras import plan, rss_trend, start_extras, stop_extras
from context_engine.bench.load_mock import parse_faults
from context_engine.bench.metrics import percentile
from context_engine.bench.overhead import _cpu_seconds


@dataclass
class Phase:
    name: str
    outcomes: list[Outcome] = field(default_factory=list)
    wall: float = 0.0
    rss_mb: list[tuple[float, float]] = field(default_factory=list)
    ledger_rows: int | None = None
    lanes: dict[str, Any] = field(default_factory=dict)
    cpu_s: float | None = None  # the proxy process's CPU seconds over the timed part
    proxy_ms: list[float] = field(default_factory=list)  # the ledger's time before forwarding
    extras: dict[str, Any] | None = None  # what the long streams and hostile callers did


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def start(cmd: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", *cmd], env=env, stdout=subprocess.DEVNULL)


def start_proxy(port: int, upstream: str, rules: str | None, ledger: str,
                env: dict[str, str], extra: list[str]) -> subprocess.Popen[bytes]:
    cmd = ["context_engine.proxy.cli", "serve", "--port", str(port), "--upstream", upstream, "--store",
           "memory://", "--ledger", ledger, *extra]
    if rules is not None:
        cmd += ["--rules", rules]
    return start(cmd, {**env, "CONTEXT_ENGINE_LOG_LEVEL": "error"})


async def sample_rss(pid: int, every: float, into: list[tuple[float, float]], stop: asyncio.Event) -> None:
    t0 = time.perf_counter()
    while not stop.is_set():
        try:
            with open(f"/proc/{pid}/status") as fh:  # noqa: ASYNC230 (a /proc file)
                kb = next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))
            into.append((round(time.perf_counter() - t0, 1), round(kb / 1024, 1)))
        except (OSError, StopIteration):
            return
        try:
            await asyncio.wait_for(stop.wait(), every)
        except TimeoutError:
            pass


async def phase(name: str, rules: str | None, upstream: str, cases: list[Any],
                args: argparse.Namespace, env: dict[str, str], tmp: str, round_no: int = 1,
                extras: bool = False) -> Phase:
    port, ledger = free_port(), os.path.join(tmp, f"{name}-{round_no}.db")  # a fresh ledger per round
    extra = ["--config", args.config] if args.config else ["--config", os.devnull]
    floor = name.startswith("floor")
    if floor:
        proc = start(["context_engine.bench.floor_proxy", "--port", str(port), "--upstream", upstream], env)
    else:
        proc = start_proxy(port, upstream, rules, ledger, env, extra)
    result = Phase(name)
    try:
        base = f"http://127.0.0.1:{port}"
        await asyncio.to_thread(wait_up, base + "/healthz")
        url = base + "/v1/chat/completions"
        async with httpx.AsyncClient(timeout=300) as client:  # first-request costs, untimed
            warm = load_cases(resolve_file("agent_traces"))[0]
            for k, msgs in enumerate(requests_of(warm, 0, 2)):
                await send(client, url, {"model": "gpt-4o", "messages": msgs}, f"warmup-{k}", 0.0)
        stop = asyncio.Event()
        side = start_extras(base, args, env) if extras else None
        if side is not None:
            await asyncio.sleep(1.0)  # its streams are under way
        cpu0 = _cpu_seconds(proc.pid)
        rss = asyncio.ensure_future(sample_rss(proc.pid, args.rss_every, result.rss_mb, stop))
        if args.cold:
            result.outcomes, result.wall = await run_cold(url, args)
        else:
            result.outcomes, result.wall = await run_sessions(url, cases, args)
        if side is not None:
            result.extras = await asyncio.to_thread(stop_extras, side)
        stop.set()
        await rss
        result.cpu_s = _cpu_seconds(proc.pid) - cpu0
        if not floor:
            async with httpx.AsyncClient(timeout=120) as client:
                result.lanes = (await client.get(base + "/healthz")).json().get("rules_lanes") or {}
                await client.get(base + "/stats")  # drains the finisher: every row is written
            with sqlite3.connect(ledger) as db:
                result.ledger_rows = db.execute("SELECT COUNT(*) FROM requests").fetchone()[0]
                result.proxy_ms = [r[0] for r in db.execute(
                    "SELECT proxy_ms FROM requests WHERE session NOT LIKE 'warmup%'") if r[0] is not None]
    finally:
        stop_process(proc)
    return result


def summary(p: Phase, delay: float) -> dict[str, Any]:
    clean = [o for o in p.outcomes if o.fault == "none" and o.status == 200 and not o.error]
    added = [_added(o, delay) for o in clean]
    proxy_failures = [o for o in p.outcomes if o.fault in ("none", "slow", "?") and
                      (o.error or o.status != 200)]
    faulted = [o for o in p.outcomes if o.fault in ("error", "reset")]
    surfaced = [o for o in faulted if o.error or (o.status or 0) >= 400]
    cold = [o for o in clean if o.session.startswith("cold-")]
    by = [o for o in clean if o.session.startswith("bystander-")]
    rss = [m for _, m in p.rss_mb]
    out: dict[str, Any] = {"requests": len(p.outcomes), "wall_s": round(p.wall, 1),
           "throughput_rps": round(len(p.outcomes) / p.wall, 2) if p.wall else None,
           "added_ms": {"p50": _r(percentile(added, 50)), "p95": _r(percentile(added, 95)),
                        "max": _r(max(added, default=None))},
           "server_ms_before_forward": {"p50": _r(percentile(p.proxy_ms, 50)), "p95": _r(percentile(p.proxy_ms, 95))},
           "cpu_ms_per_request": _r(1000 * p.cpu_s / len(p.outcomes)) if p.cpu_s is not None and p.outcomes else None,
           "proxy_failures": len(proxy_failures),
           "failure_examples": sorted({f"{o.fault}/{o.status}/{o.error}" for o in proxy_failures})[:5],
           "faults": len(faulted), "faults_surfaced": len(surfaced),
           "ledger_rows": p.ledger_rows,
           # the extras' requests have rows too, in numbers the bench does not count
           "ledger_rows_expected": None if p.ledger_rows is None or p.extras is not None
           else len(p.outcomes) + 2, "lanes": p.lanes,
           "rss_mb": {"first": rss[0] if rss else None, "after_warmup": rss[len(rss) // 4] if rss else None,
                      "last": rss[-1] if rss else None, "max": max(rss, default=None),
                      "trend": rss_trend(p.rss_mb)}}
    if p.extras is not None:
        out["extras"] = p.extras
    if cold:
        out["cold_added_ms"] = [_r(_added(o, delay)) for o in cold]
        out["bystander_added_ms"] = _spread([_added(o, delay) for o in by])
        # the bystander requests in flight while a cold request was: the ones it could delay
        meanwhile = [o for o in by if any(o.sent < c.sent + c.seconds and c.sent < o.sent + o.seconds
                                          for c in cold)]
        out["bystander_meanwhile_added_ms"] = _spread([_added(o, delay) for o in meanwhile])
        out["bystander_meanwhile_added_ms"]["n"] = len(meanwhile)
    return out


def _added(o: Outcome, delay: float) -> float:
    """Milliseconds the client waited beyond what the upstream held the request."""
    return (o.seconds - (delay if o.upstream_s is None else o.upstream_s)) * 1000


def _spread(values: list[float]) -> dict[str, float | None]:
    return {"p50": _r(percentile(values, 50)), "p95": _r(percentile(values, 95)), "max": _r(max(values, default=None))}


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 1)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    parse_faults(args.faults)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [os.getcwd(), *filter(None, [os.environ.get("PYTHONPATH")])])}
    cases = [] if args.cold else load_cases(resolve_file(args.data), dedupe=args.data == "locomo")
    port = free_port()
    mock = start(["context_engine.bench.load_mock", "--port", str(port), "--delay", str(args.delay),
                  "--faults", args.faults, "--seed", str(args.seed)], env)
    # where the report is written is the caller's machine, not a condition of the run
    report: dict[str, Any] = {"args": {k: v for k, v in vars(args).items() if k != "json"}}
    try:
        await asyncio.to_thread(wait_up, f"http://127.0.0.1:{port}/")
        upstream = f"http://127.0.0.1:{port}/v1"
        with tempfile.TemporaryDirectory() as tmp:
            phases = plan(args)
            rounds: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in phases}
            for r in range(args.rounds):  # phases interleaved: the machine's drift hits each alike
                for name, rules, extras in phases:
                    p = await phase(name, rules, upstream, cases, args, env, tmp, r + 1, extras)
                    report[name] = summary(p, args.delay)
                    report[name]["rss_over_time"] = p.rss_mb
                    rounds[name].append(report[name]["added_ms"])
                    print(f"round {r + 1} {name}: "
                          f"{json.dumps({k: v for k, v in report[name].items() if k != 'rss_over_time'})}",
                          file=sys.stderr)
            for name, got in rounds.items():
                report[name]["added_ms_rounds"] = got
                report[name]["added_ms_median_of_rounds"] = {
                    q: _r(statistics.median(g[q] for g in got if g[q] is not None)) for q in ("p50", "p95", "max")
                    if any(g[q] is not None for g in got)}
    finally:
        stop_process(mock)
    return report


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="agent_traces", help="agent_traces | locomo | a JSONL path")
    p.add_argument("--sessions", type=int, default=30)
    p.add_argument("--delay", type=float, default=1.0, help="upstream seconds per reply")
    p.add_argument("--rules", default=None, help="rules of the proxy (default: configured)")
    p.add_argument("--config", default=None, help="config.yaml of the proxies (default: none)")
    p.add_argument("--skip", type=int, default=0, help="request points skipped at the start of each case")
    p.add_argument("--turns", type=int, default=0, help="request points per case at most (0 = all)")
    p.add_argument("--duration", type=float, default=0, help="seconds to keep replaying (0 = each case once)")
    p.add_argument("--stream", action="store_true", help="stream every reply (SSE)")
    p.add_argument("--faults", default="", help="e.g. reset=0.05,error=0.05,slow=0.02")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rounds", type=int, default=1,
                   help="run the phases this many times, interleaved; reports the median of rounds")
    p.add_argument("--cold", type=int, default=0, help="N cold LoCoMo requests (300+ old turns) with bystanders")
    p.add_argument("--no-floor", action="store_true", help="skip the passthrough floor")
    p.add_argument("--no-stagger", action="store_true",
                   help="start every session at once (default: starts spread over one upstream delay)")
    p.add_argument("--phases", default="", help="phases of a round, e.g. floor,proxy (default: all three)")
    p.add_argument("--tool-result-kb", type=int, default=0, help="grow every tool result to this many KB")
    p.add_argument("--long-streams", type=int, default=0, help="callers streaming long replies beside the sessions")
    p.add_argument("--stream-chunks", type=int, default=20_000, help="one-character deltas per long stream")
    p.add_argument("--stream-seconds", type=float, default=20.0,
                   help="seconds the upstream spreads a long stream over (0 = as fast as it can)")
    p.add_argument("--hostile-rps", type=float, default=0.0, help="keyless worst-input requests a second")
    p.add_argument("--hostile-scale", type=float, default=1.0, help="size of the hostile bodies (1 = full)")
    p.add_argument("--extras-only", action="store_true", help="run each phase only with the extras")
    p.add_argument("--rss-every", type=float, default=5.0)
    p.add_argument("--json", default=None, help="write the report here")
    p.add_argument("--note", default="", help="a line on the conditions, kept in the report's _about")
    args = p.parse_args()
    load_before = os.getloadavg()[0]
    report = asyncio.run(main_async(args))
    # the command without where it wrote and without the note (kept on its own below)
    command = shlex.join(["python3", "bench/load.py", *without_outputs(sys.argv[1:], ("--json", "--note"))])
    report["_about"] = {"command": command,
                        "date": time.strftime("%Y-%m-%d"), "note": args.note,
                        "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2)}
    text = json.dumps(report, indent=1)
    if args.json:
        with open(args.json, "w") as fh:
            fh.write(text)
    for name in (n for n in report if n != "args" and not n.startswith("_")):
        m = report[name].get("added_ms_median_of_rounds", {})
        print(f"{name:20} added p50 {m.get('p50')} ms  p95 {m.get('p95')} ms  max {m.get('max')} ms  "
              f"cpu/request {report[name]['cpu_ms_per_request']} ms  failures {report[name]['proxy_failures']}  "
              f"rss max {report[name]['rss_mb']['max']} MB")
        if "cold_added_ms" in report[name]:
            print(f"{'':20} cold added {report[name]['cold_added_ms']} ms; bystanders "
                  f"{report[name]['bystander_added_ms']}, in flight beside a cold request "
                  f"{report[name]['bystander_meanwhile_added_ms']}")
        if "extras" in report[name]:
            print(f"{'':20} extras {json.dumps(report[name]['extras'])}")

if __name__ == "__main__":
    main()
