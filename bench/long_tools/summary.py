"""Statistics of a built long-tool-sessions file, for its README and the issue.

    python3 -m context_engine.bench.long_tools.summary bench/data/long_tools_dev.jsonl.gz

Prints sessions per family, tool calls and tokens per session (min/median/max), where
the cuts sit, probes per kind, and how far back the values of the next calls sit: for
each ``next_action`` probe, and for every argument value of every call in the full
sessions (rebuilt from each session's last cut plus its next step), whether the newest
tool result holding it is the newest result, the 2nd-5th newest, or older.
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from context_engine.bench.long_tools.cuts import call_values


def read(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def age_bucket(history: list[dict[str, Any]], value: str) -> str:
    """Where the newest tool result holding ``value`` sits, counted from the end of ``history``."""
    results = [m for m in history if m["role"] == "tool"]
    for age, m in enumerate(reversed(results), 1):
        if value in str(m.get("content") or ""):
            return "newest result" if age == 1 else "2nd-5th newest" if age <= 5 else "older (6th+)"
    return "not in a tool result"


def spread(xs: list[int]) -> str:
    return f"{min(xs)} / {int(statistics.median(xs))} / {max(xs)}"


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    sessions: dict[str, dict[str, Any]] = {}
    for r in rows:
        s = sessions.setdefault(r["meta"]["task"], {"family": r["meta"]["family"], "meta": r["meta"], "rows": []})
        s["rows"].append(r)
    families = Counter(s["family"] for s in sessions.values())
    probe_kinds = Counter(p["kind"] for r in rows for p in r["probes"])
    probe_age: Counter[str] = Counter(age_bucket(r["messages"], p["answer"]) for r in rows
                                      for p in r["probes"] if p["kind"] == "next_action")
    call_age: Counter[str] = Counter()
    for s in sessions.values():
        last = max(s["rows"], key=lambda r: r["meta"]["cut_index"])
        full = last["messages"] + [last["meta"]["next_step"]]
        for i, m in enumerate(full):
            if m["role"] == "assistant" and m.get("tool_calls"):
                call_age.update(age_bucket(full[:i], v) for v in call_values(m))
    shares = [round(r["meta"]["tool_calls_before"] / r["meta"]["tool_calls"], 2) for r in rows]
    return {
        "cases": len(rows), "sessions": len(sessions), "families": dict(sorted(families.items())),
        "tool_calls": spread([s["meta"]["tool_calls"] for s in sessions.values()]),
        "tokens": spread([s["meta"]["full_tokens"] for s in sessions.values()]),
        "case_tokens": spread([r["meta"]["approx_tokens"] for r in rows]),
        "cut_share": spread([int(100 * x) for x in shares]) + " (% of calls before the cut)",
        "cuts_per_session": dict(Counter(len(s["rows"]) for s in sessions.values())),
        "probes": dict(sorted(probe_kinds.items())),
        "cases_with_next_action": sum(any(p["kind"] == "next_action" for p in r["probes"]) for r in rows),
        "next_action_evidence": dict(sorted(probe_age.items())),
        "all_call_values": dict(sorted(call_age.items())),
        "per_family": {f: {"tool_calls": spread([s["meta"]["tool_calls"] for s in sessions.values() if s["family"] == f]),
                           "tokens": spread([s["meta"]["full_tokens"] for s in sessions.values() if s["family"] == f])}
                       for f in sorted(families)},
    }


def main(argv: list[str] | None = None) -> None:
    args = argv if argv is not None else sys.argv[1:]
    path = Path(args[0] if args else "bench/data/long_tools_dev.jsonl.gz")
    print(json.dumps(summarise(read(path)), indent=2))


if __name__ == "__main__":
    main()
