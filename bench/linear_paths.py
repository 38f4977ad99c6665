"""Growth of the rewrite paths that once were super-linear, on pathological input.

Each path runs at n, 2n and 4n items; a linear path takes about 2x per doubling, a
quadratic one about 4x. Paths: ``retrieve``'s ``Tail.cut`` (no boundary pays off, so
every one is tried), breakpoint ``targets`` (every message marked, every other one
left out, so its marker moves), ``kept_positions`` (n identical messages), Anthropic ``merge`` (one run of
n same-role messages). Run as ``python3 -m context_engine.bench.linear_paths``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

from context_engine.proxy.dialects.anthropic.turns import Out, merge
from context_engine.proxy.engine.breakpoints import kept_positions, targets
from context_engine.proxy.engine.tokens import TokenCounter
from context_engine.rules.retrieve.window import Tail


def _cut(n: int) -> Callable[[], Any]:
    msgs: list[Any] = [{"role": "system", "content": "s"}]
    for i in range(n):
        msgs.append({"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} words"})
    counter, tail = TokenCounter(), Tail(4, 1, 10 ** 9, 10.0, False)
    return lambda: tail.cut(msgs, counter)


def _targets(n: int) -> Callable[[], Any]:
    original = [{"role": "user", "content": [{"type": "text", "text": f"m{i}",
                                              "cache_control": {"type": "ephemeral"}}]} for i in range(n)]
    rewritten = original[::2]  # every other message left: its marker moves back one
    return lambda: targets(original, rewritten)


def _kept(n: int) -> Callable[[], Any]:
    same = [{"role": "user", "content": "ok"} for _ in range(n)]
    return lambda: kept_positions(same, list(same))


def _merge(n: int) -> Callable[[], Any]:
    outs = [Out("user", [json.dumps({"type": "text", "text": f"t{i}"})], orig=2 * i) for i in range(n)]
    return lambda: merge(outs, lambda b: ("text", ""))


PATHS = {"tail_cut": _cut, "breakpoint_targets": _targets, "kept_positions": _kept,
         "anthropic_merge": _merge}


def _time(fn: Callable[[], Any], repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=4000, help="smallest size (then 2n, 4n)")
    args = parser.parse_args()
    out: dict[str, Any] = {}
    for name, make in PATHS.items():
        times = [_time(make(args.n * k)) for k in (1, 2, 4)]
        out[name] = {"ms": [round(t * 1000, 2) for t in times],
                     "x_per_doubling": round((times[2] / times[0]) ** 0.5, 2)}
    print(json.dumps({"n": [args.n, 2 * args.n, 4 * args.n], **out}, indent=2))


if __name__ == "__main__":
    main()
