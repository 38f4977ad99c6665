"""Throughput and latency with one and with N replicas behind nginx, in one run.

``python3 bench/overhead.py --replicas 2`` (run by hand, under the bench lock). The
topology of ``deploy/`` as processes (``bench/fleet.py``): nginx with
``deploy/nginx.conf``, ``serve`` replicas sharing one Redis store (``--redis``, flushed
first) and one PostgreSQL ledger (a throwaway server), and a loopback upstream
answering after ``--delay`` seconds (``context_engine.bench.load_mock``). Phase 1 puts one replica
behind nginx, phase 2 puts ``--replicas``; each phase runs ``--sessions`` concurrent
sessions replaying real agent traces (``bench/load.py``'s client) for ``--duration``
seconds. Reports requests per second, the p50/p95 round trip minus the time the upstream
held the request,
ledger rows against requests, and the CPU seconds each kind of process used (on a
machine with few cores, what saturates is what limits).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from context_engine.bench.cases import load_cases, resolve_file
from context_engine.bench.fleet import Nginx, Postgres, Replica, free_port, wait_up
from context_engine.bench.load_client import run_sessions
from context_engine.bench.metrics import percentile
from context_engine.bench.overhead import _cpu_seconds
from context_engine.proxy.recording.ledger import read_rows


def _cpu(procs: dict[str, list[Any]]) -> dict[str, float]:
    out = {}
    for kind, ps in procs.items():
        try:
            out[kind] = sum(_cpu_seconds(p.pid) for p in ps)
        except OSError:
            out[kind] = 0.0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out["client"] = usage.ru_utime + usage.ru_stime
    return out


def _children(pid: int) -> list[Any]:
    """nginx's worker processes (their CPU is not the master's)."""
    try:
        out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    except FileNotFoundError:
        return []
    return [type("P", (), {"pid": int(x)})() for x in out.split()]


def phase(n: int, args: argparse.Namespace, pg: Postgres, upstream: str, config: str,
          mock: Any, cases: list[Any]) -> dict[str, Any]:
    import redis

    redis.Redis.from_url(args.redis).flushdb()
    ledger = pg.database(f"bench_{n}")
    quiet = {"CONTEXT_ENGINE_LOG_LEVEL": "error"}  # an overloaded replica warns per shed rewrite
    replicas = [Replica(f"r{i}", config, quiet, upstream=upstream, store=args.redis, ledger=ledger).launch()
                for i in range(n)]
    for r in replicas:
        r.wait()
    try:
        with Nginx([r.port for r in replicas]) as nginx:
            procs = {"replicas": [r.proc for r in replicas], "nginx": _children(nginx.proc.pid),
                     "upstream": [mock]}
            before = _cpu(procs)
            outcomes, wall = asyncio.run(run_sessions(nginx.url + "/v1/chat/completions", cases, args))
            used = {k: round(v - before[k], 1) for k, v in _cpu(procs).items()}
    finally:
        for r in replicas:
            r.stop()  # flushes the ledger
    ok = [o for o in outcomes if o.status == 200 and not o.error]
    added = [(o.seconds - (args.delay if o.upstream_s is None else o.upstream_s)) * 1000 for o in ok]
    return {"replicas": n, "requests": len(outcomes), "errors": len(outcomes) - len(ok),
            "wall_s": round(wall, 1), "throughput_rps": round(len(ok) / wall, 2),
            "added_p50_ms": round(statistics.median(added), 1) if added else None,
            "added_p95_ms": round(percentile(added, 95) or 0.0, 1),
            "ledger_rows": len(read_rows(ledger)), "cpu_seconds": used,
            "cores": os.cpu_count()}


def run(args: argparse.Namespace) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    port = free_port()
    mock = subprocess.Popen([sys.executable, "-m", "context_engine.bench.load_mock", "--port", str(port),
                             "--delay", str(args.delay)], env=env)
    cases = load_cases(resolve_file(args.data))
    config = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
    config.write("rules_deadline_ms: 250\nsession_key: bench-replicas\n" +
                 (f"rules: [{args.rules}]\n" if args.rules else ""))
    config.close()
    try:
        wait_up(f"http://127.0.0.1:{port}/v1/chat/completions", 30)
        with Postgres() as pg:
            upstream = f"http://127.0.0.1:{port}/v1"
            return {"delay_s": args.delay, "sessions": args.sessions, "duration_s": args.duration,
                    "phases": [phase(n, args, pg, upstream, config.name, mock, cases)
                               for n in (1, args.replicas)]}
    finally:
        os.unlink(config.name)
        mock.terminate()
        mock.wait(10)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--redis", default=os.environ.get("CONTEXT_ENGINE_TEST_REDIS", "redis://127.0.0.1:6379/0"),
                   help="--replicas: the shared store (flushed before each phase)")
    p.add_argument("--sessions", type=int, default=32, help="--replicas: concurrent sessions")
    p.add_argument("--delay", type=float, default=0.2, help="--replicas: upstream seconds per reply")
    p.add_argument("--duration", type=float, default=60.0, help="--replicas: seconds per phase")
    p.add_argument("--data", default="agent_traces", help="--replicas: cases replayed")
    for name, default in (("skip", 0), ("turns", 0)):
        p.add_argument(f"--{name}", type=int, default=default, help=argparse.SUPPRESS)
    p.set_defaults(stream=False, no_stagger=False, tool_result_kb=0)
