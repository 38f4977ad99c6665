"""Added latency of the proxy over calling the upstream directly, in one run.

Starts the mock upstream (``--plain``: no token work of its own) and three proxies as
separate processes on loopback: passthrough (all rules off), shadow (the rules run
after the response) and rewrite (the rules run before forwarding). The same
chat-completions requests go to the mock directly and to each proxy, interleaved,
over keep-alive connections. Each request resends a growing history, as agents do,
with a new last user message. Reports p50/p95 round trips and the p50/p95 added over
direct, for ~4k- and ~25k-token requests, and shadow's cost over passthrough. Run by
hand; ``--json OUT`` writes the report (with its command, date, load and ``--note``) that
``docs/benchmarks.md`` is generated from:

    python3 bench/overhead.py [--requests 300] [--rules fold_duplicates,tool_json,zones] [--json OUT]

``--replicas 2`` measures something else: throughput and p50 with one and two replicas
behind nginx, sharing Redis and PostgreSQL (``bench/replicas.py``).

``--api chat,responses,anthropic`` sends the same conversation in each wire format (to
``/v1/chat/completions``, ``/v1/responses``, ``/v1/messages``), interleaved in one run,
and reports each API apart.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import httpx

from context_engine.bench.fleet import free_port, wait_up
from context_engine.bench.metrics import percentile
from context_engine.bench.run_record import about, emit
from context_engine.rules import DEFAULT_RULES

WORDS = ("context engine proxy tokens cache prefix summary window retrieval budget zone "
         "rule ledger agent tool result schema template session turn").split()


def history(target_tokens: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful agent."}]
    i = 0
    while len(json.dumps(msgs)) < target_tokens * 4.6:  # ~4.6 chars per token for this text
        text = " ".join(WORDS[(i * 7 + k) % len(WORDS)] + str(i + k) for k in range(120))
        msgs.append({"role": "user" if i % 2 == 0 else "assistant", "content": text})
        i += 1
    return msgs


def request_for(api: str, messages: list[dict[str, Any]]) -> tuple[str, bytes]:
    """The path and body of ``messages`` in the dialect named ``api`` (its own ``write``)."""
    from context_engine.bench.wire import to_wire

    return to_wire(api, "gpt-4o", messages, None)


def pct(xs: list[float], q: float) -> float:
    """The shared nearest-rank percentile (``bench/metrics.py``), q in 0..1; 0 for no values."""
    value = percentile(xs, q * 100)
    return 0.0 if value is None else value


def start_proxy(port: int, upstream: str, rules: str, mode: str, env: dict[str, str]) -> Any:
    return subprocess.Popen(
        [sys.executable, "-m", "context_engine.proxy.cli", "serve", "--port", str(port), "--upstream", upstream,
         "--rules", rules, "--mode", mode, "--store", "memory://", "--config", os.devnull,
         "--ledger", f"/tmp/context-engine-overhead-{mode}-{port}.db"],
        env={**env, "CONTEXT_ENGINE_LOG_LEVEL": "warning"})


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_idle(procs: list[Any], limit: float) -> None:
    """Wait until no process used more than 5% of a core over one second (at most
    ``limit`` seconds): background work left from the warm-up must not be timed."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            before = [_cpu_seconds(p.pid) for p in procs]
        except OSError:  # no /proc: just wait
            time.sleep(min(limit, 5.0))
            return
        time.sleep(1.0)
        if max(_cpu_seconds(p.pid) - b for p, b in zip(procs, before)) < 0.05:
            return


def run(args: argparse.Namespace) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    mock_port = free_port()
    upstream = f"http://127.0.0.1:{mock_port}/v1"
    targets = {"direct": mock_port, "passthrough": free_port(), "shadow": free_port(),
               "rewrite": free_port()}
    procs = [subprocess.Popen([sys.executable, "-m", "context_engine.proxy.demo.mock_upstream", "--port",
                               str(mock_port), "--plain"], env=env)]
    procs.append(start_proxy(targets["passthrough"], upstream, "", "rewrite", env))
    procs.append(start_proxy(targets["shadow"], upstream, args.rules, "shadow", env))
    procs.append(start_proxy(targets["rewrite"], upstream, args.rules, "rewrite", env))
    results: dict[str, Any] = {"rules": args.rules, "requests": args.requests, "runs": []}
    try:
        wait_up(f"http://127.0.0.1:{mock_port}/v1/models")
        for name, port in targets.items():
            if name != "direct":
                wait_up(f"http://127.0.0.1:{port}/healthz")
        apis = [a.strip() for a in args.api.split(",") if a.strip()]
        with httpx.Client(timeout=600) as client:  # a new session's first request embeds its history
            for size in (4000, 25000):
                base = history(size)
                times: dict[tuple[str, str], list[float]] = {(api, name): [] for api in apis for name in targets}
                tokens = dict.fromkeys(apis, 0)
                for i in range(args.requests + 20):
                    if i == 20:  # a new session's history is embedded once, in the shadow
                        wait_idle(procs, args.settle)  # proxy in the background: not timed
                    msgs = base + [{"role": "user", "content": f"question number {i}: what changed?"}]
                    for api in apis:
                        path, body = request_for(api, msgs)
                        for name, port in targets.items():
                            t = time.perf_counter()
                            r = client.post(f"http://127.0.0.1:{port}{path}", content=body,
                                            headers={"content-type": "application/json",
                                                     "authorization": "Bearer bench"})
                            r.raise_for_status()
                            if i >= 20:  # warm-up excluded
                                times[(api, name)].append((time.perf_counter() - t) * 1000)
                            tokens[api] = int(r.headers.get("x-context-engine-tokens-before", tokens[api]))
                for api in apis:
                    direct = times[(api, "direct")]
                    row: dict[str, Any] = {"tokens": tokens[api],
                                           "direct_p50_ms": round(statistics.median(direct), 3)}
                    for name in ("passthrough", "shadow", "rewrite"):
                        ts = times[(api, name)]
                        row[name] = {
                            "p50_ms": round(statistics.median(ts), 3),
                            "added_p50_ms": round(statistics.median(ts) - statistics.median(direct), 3),
                            "added_p95_ms": round(pct(ts, 0.95) - pct(direct, 0.95), 3),
                        }
                    row["shadow_over_passthrough_p50_ms"] = round(
                        statistics.median(times[(api, "shadow")])
                        - statistics.median(times[(api, "passthrough")]), 3)
                    results["runs"].append({"api": api, "size": size, **row})
    finally:
        for p in procs:
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--settle", type=float, default=300.0,
                   help="after the warm-up, wait up to this many seconds for the proxies to go idle")
    p.add_argument("--api", default="chat",
                   help="comma-separated dialects to send (proxy/dialects/registry.py: chat, "
                        "responses, anthropic, gemini)")
    p.add_argument("--rules", default=",".join(DEFAULT_RULES),
                   help="rules of the shadow and rewrite proxies (default: the default rules)")
    p.add_argument("--json", default=None, metavar="OUT", help="also write the report here")
    p.add_argument("--note", default="", help="a line on the conditions, kept in the report")
    p.add_argument("--replicas", type=int, default=0,
                   help="instead: throughput and p50 with 1 and N replicas behind nginx (bench/replicas.py)")
    from context_engine.bench import replicas

    replicas.add_arguments(p)
    args = p.parse_args()
    started = about("python3 bench/overhead.py", sys.argv[1:], args.note)
    report = {**started, **(replicas.run(args) if args.replicas else run(args))}
    emit(report, args.json)


if __name__ == "__main__":
    main()
