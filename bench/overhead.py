"""Added latency of the proxy over calling the upstream directly.

Starts the mock upstream (``--plain``: no token work of its own) and the proxy as
separate processes on loopback, then sends the same chat-completions requests to
both, interleaved, over keep-alive connections. Each request resends a growing
history, as agents do, with a new last user message. Reports p50/p95 of the
direct and proxied round trips and the p50 difference, for ~4k- and ~25k-token
requests. Run by hand; numbers go in the README, not in tests:

    python3 bench/overhead.py [--requests 300] [--rules ""] [--mode shadow]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from typing import Any

import httpx

WORDS = ("context engine proxy tokens cache prefix summary window retrieval budget zone "
         "rule ledger agent tool result schema template session turn").split()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def history(target_tokens: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful agent."}]
    i = 0
    while len(json.dumps(msgs)) < target_tokens * 4.6:  # ~4.6 chars per token for this text
        text = " ".join(WORDS[(i * 7 + k) % len(WORDS)] + str(i + k) for k in range(120))
        msgs.append({"role": "user" if i % 2 == 0 else "assistant", "content": text})
        i += 1
    return msgs


def wait_up(url: str) -> None:
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def run(args: argparse.Namespace) -> dict[str, Any]:
    mock_port, proxy_port = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    procs = [
        subprocess.Popen([sys.executable, "-m", "proxy.mock_upstream", "--port", str(mock_port), "--plain"], env=env),
        subprocess.Popen([sys.executable, "-m", "proxy.cli", "serve", "--port", str(proxy_port),
                          "--upstream", f"http://127.0.0.1:{mock_port}/v1", "--rules", args.rules,
                          "--store", "memory://", "--ledger", args.ledger, "--config", os.devnull,
                          "--mode", args.mode],
                         env={**env, "CONTEXT_ENGINE_LOG_LEVEL": "warning"}),
    ]
    results: dict[str, Any] = {"rules": args.rules, "mode": args.mode, "requests": args.requests}
    try:
        wait_up(f"http://127.0.0.1:{mock_port}/v1/models")
        wait_up(f"http://127.0.0.1:{proxy_port}/healthz")
        with httpx.Client(timeout=30) as client:
            for size in (4000, 25000):
                base = history(size)
                direct, proxied = [], []
                for i in range(args.requests + 20):
                    body = json.dumps({"model": "gpt-4o", "messages": base + [
                        {"role": "user", "content": f"question number {i}: what changed?"}]}).encode()
                    for port, out in ((mock_port, direct), (proxy_port, proxied)):
                        t = time.perf_counter()
                        r = client.post(f"http://127.0.0.1:{port}/v1/chat/completions", content=body,
                                        headers={"content-type": "application/json",
                                                 "authorization": "Bearer bench"})
                        r.raise_for_status()
                        if i >= 20:  # warm-up excluded
                            out.append((time.perf_counter() - t) * 1000)
                tokens = int(r.headers.get("x-context-engine-tokens-before", 0))
                results[f"{size}"] = {
                    "tokens": tokens,
                    "direct_p50_ms": round(statistics.median(direct), 3),
                    "proxy_p50_ms": round(statistics.median(proxied), 3),
                    "added_p50_ms": round(statistics.median(proxied) - statistics.median(direct), 3),
                    "added_p95_ms": round(pct(proxied, 0.95) - pct(direct, 0.95), 3),
                }
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=10)
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--rules", default="", help='rules to enable in the proxy ("" = all off)')
    p.add_argument("--mode", default="rewrite", choices=("rewrite", "shadow", "ab"))
    p.add_argument("--ledger", default="/tmp/context-engine-overhead.db")
    args = p.parse_args()
    print(json.dumps(run(args), indent=2))


if __name__ == "__main__":
    main()
