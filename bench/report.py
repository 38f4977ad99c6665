"""Bench results as rich tables (terminal), JSON (machines) and Markdown (README)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from context_engine.bench.report_regimes import regimes_table

PRIMARY = "o200k_base"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"


def _ms(lat: dict[str, Any]) -> str:
    return "-" if lat.get("median") is None else f"{lat['median']:.2f}"


def _p95(lat: dict[str, Any]) -> str:
    return "-" if lat.get("p95") is None else f"{lat['p95']:.2f}"


def _retention(s: dict[str, Any]) -> str:
    if not s["probes"]:
        return "-"
    kinds = "".join(f"; {k} {r}/{n}" for k, (r, n) in s.get("retained_by_kind", {}).items())
    return f"{_pct(s['retention'])} ({s['retained']}/{s['probes']}{kinds})"


def single_table(file: str, result: dict[str, Any]) -> Table:
    encodings = list(next(iter(result["systems"].values()))["tokens_before"])
    table = Table(title=escape(f"{file}: {result['cases']} cases, one request each"))
    table.add_column("system")
    table.add_column(f"tokens ({PRIMARY})", justify="right")
    for enc in encodings:
        label = {"messages": "saved msgs", "tool_results": "saved tool results"}.get(
            enc, f"saved {enc.split('_')[0]}")
        table.add_column(label, justify="right")
    for name in ("evidence retained", "invalid", "fail-open", "median ms", "p95 ms",
                 "+background p95", "over deadline"):
        table.add_column(name, justify="right")
    for name, s in result["systems"].items():
        table.add_row(escape(name), f"{s['tokens_after'].get(PRIMARY, 0):,}",
                      *[_pct(s["reduction"][e]) for e in encodings], _retention(s),
                      str(s["invalid"]), str(s["failed_open"]),
                      _ms(s["latency_ms"]), _p95(s["latency_ms"]),
                      _p95(s.get("client_latency_ms", {})), str(s.get("latency_over_deadline", 0)))
    return table


def replay_table(file: str, result: dict[str, Any], cache_ratio: float) -> Table:
    title = f"{file}: replay of {result['cases']} cases, cache read at {cache_ratio}x"
    table = Table(title=escape(title))
    kinds = sorted({k for s in result["systems"].values() for k in s["replay"].get("billing", {})})
    for name in ("system", "requests", "reduction", "prefix stable (mean)", "full prefix",
                 "cost vs none", *[f"{k} billed vs direct (report gap)" for k in kinds],
                 "evidence", "invalid", "median ms", "p95 ms", "ms @20", "ms @200", "prefetch ms p50/p95"):
        table.add_column(name, justify="left" if name == "system" else "right")
    for name, s in result["systems"].items():
        r = s["replay"]
        at = r["latency_ms_at_turn"]
        table.add_row(escape(name), str(s["requests"]), _pct(s["reduction"].get(PRIMARY)),
                      _pct(r["prefix_stability_mean"]), _pct(r["full_prefix_share"]),
                      "-" if r["cost_vs_none"] is None else f"{r['cost_vs_none']:.3f}x",
                      *[_billed(r.get("billing", {}).get(k)) for k in kinds],
                      _retention(s), str(s["invalid"]), _ms(s["latency_ms"]), _p95(s["latency_ms"]),
                      _ms(at["20"]), _ms(at["200"]),
                      f"{_ms(s.get('prefetch_latency_ms', {}))} / {_p95(s.get('prefetch_latency_ms', {}))}")
    return table


def _billed(b: dict[str, Any] | None) -> str:
    """The harness's cache-adjusted cost ratio and how far the report's saving is from it."""
    if not b or b.get("cost_vs_direct") is None:
        return "-"
    gap = b.get("gap_points")
    return f"{b['cost_vs_direct']:.3f}x ({'-' if gap is None else f'{gap:+.1f} pt'})"


def ab_table(file: str, result: dict[str, Any]) -> Table | None:
    """The replay as an A/B test (each request billed in both arms by the simulator) beside
    the counterfactual estimate the report uses for the original."""
    rows = [(name, kind, b) for name, s in result["systems"].items()
            for kind, b in sorted(s["replay"].get("billing", {}).items()) if b.get("direct_usd")]
    if not rows:
        return None
    table = Table(title=escape(f"{file}: A/B arms vs the counterfactual estimate (input tokens)"))
    for col in ("system", "billing", "passthrough arm $", "rewrite arm $", "A/B saving",
                "estimate of original $", "estimate − passthrough arm", "report saving"):
        table.add_column(col, justify="left" if col in ("system", "billing") else "right")
    for name, kind, b in rows:
        err = b.get("estimate_vs_direct_pct")
        table.add_row(escape(name), kind, f"{b['direct_usd']:.4f}", f"{b['billed_usd']:.4f}",
                      _pct(b.get("harness_saving")), f"{b.get('report_original_usd', 0):.4f}",
                      "-" if err is None else f"{err:+.1f}%", _pct(b.get("report_saving")))
    return table


def rules_table(file: str, result: dict[str, Any]) -> Table | None:
    rows = []
    for name, s in result["systems"].items():
        before = s["tokens_before"].get(PRIMARY, 0)
        for rule, saved in s["rule_saved"].items():
            rows.append((name, rule, saved, saved / before if before else 0.0))
    if not rows:
        return None
    table = Table(title=escape(f"{file}: tokens saved per rule (journal, {PRIMARY})"))
    for col in ("system", "rule", "saved", "share of original"):
        table.add_column(col, justify="left" if col in ("system", "rule") else "right")
    for name, rule, saved, share in rows:
        table.add_row(escape(name), escape(rule), f"{saved:,}", _pct(share))
    return table


def latency_growth(file: str, result: dict[str, Any]) -> Table:
    buckets = sorted({b for s in result["systems"].values() for b in s["latency_ms_by_length"]},
                     key=lambda b: int(b[1:]) + 1 if b.startswith(">") else int(b.split("-")[0]))
    table = Table(title=escape(f"{file}: median rewrite ms by request length (messages)"))
    table.add_column("system")
    for b in buckets:
        table.add_column(b, justify="right")
    for name, s in result["systems"].items():
        by = s["latency_ms_by_length"]
        table.add_row(escape(name), *[_ms(by[b]) if b in by else "-" for b in buckets])
    return table


def recall_table(file: str, result: dict[str, Any]) -> Table | None:
    """bench --recall: evidence reachable directly or after recall, and total tokens."""
    rows = [(name, s["recall"]) for name, s in result["systems"].items() if "recall" in s]
    if not rows:
        return None
    table = Table(title=f"{file}: recall (careful model; total tokens include recall rounds)")
    for col in ("system", "probes", "visible", "reachable (id)", "rounds", "total tokens",
                "reduction", "reachable (query)", "total tokens (query)", "reduction (query)"):
        table.add_column(col, justify="left" if col == "system" else "right")
    for name, r in rows:
        table.add_row(name, str(r["probes"]), _pct(r["direct"]), _pct(r["reachable_by_id"]),
                      str(r["rounds_id"]), f"{r['total_tokens_id']:,}", _pct(r["reduction_id"]),
                      _pct(r["reachable_by_query"]), f"{r['total_tokens_query']:,}",
                      _pct(r["reduction_query"]))
    return table


def way_back_table(file: str, result: dict[str, Any]) -> Table | None:
    """Replay with the re-read model: the bill with the agent's way back to the next-action
    evidence a rewrite hid, and what that way back took."""
    rows = [(name, kind, s, b["way_back"]) for name, s in result["systems"].items()
            for kind, b in sorted(s.get("replay", {}).get("billing", {}).items()) if "way_back" in b]
    if not any(w["cuts"] for *_, w in rows):
        return None
    table = Table(title=escape(f"{file}: what clearing costs the agent (the way back to "
                               "next-action evidence, bench/reread.py)"))
    for col in ("system", "billing", "bill vs direct", "with the way back", "worst session",
                "next-action visible", "+ brought back", "pieces lost", "recall rounds",
                "re-run commands (extra turns)", "per session"):
        table.add_column(col, justify="left" if col in ("system", "billing") else "right")
    for name, kind, s, w in rows:  # each billing model replays its own session: its own evidence
        worst = w.get("worst_session") or {}
        table.add_row(escape(name), kind, _billed(s["replay"]["billing"][kind]),
                      f"{w['cost_vs_direct']:.3f}x", f"{worst.get('cost_vs_direct', 0):.2f}x",
                      f"{w['visible']}/{w['checked']}", f"+{w['probes_back']}", str(w["unreachable"]),
                      str(w["recall_rounds"]), str(w["rereads"]),
                      f"{w['per_session']['recall_rounds']:.2f} / {w['per_session']['rereads']:.2f}")
    return table


def print_report(report: dict[str, Any], console: Console | None = None) -> None:
    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=200)
    rules = ", ".join(report["rules"]) or "(no rules: the same as none)"
    console.print(f"engine = {rules}", markup=False)
    for file, result in report["files"].items():
        if report["mode"] == "replay":
            console.print(replay_table(file, result, report["cache_ratio"]))
        else:
            console.print(single_table(file, result))
        console.print(latency_growth(file, result))
        ab = ab_table(file, result) if report["mode"] == "replay" else None
        if ab is not None:
            console.print(ab)
        table = rules_table(file, result)
        if table is not None:
            console.print(table)
        for table in (recall_table(file, result), way_back_table(file, result)):
            if table is not None:
                console.print(table)
    regimes = regimes_table(report) if report["mode"] == "replay" else None
    if regimes is not None:
        console.print(regimes)


def write_json(report: dict[str, Any], path: str) -> None:
    Path(path).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def markdown(report: dict[str, Any]) -> str:
    """A short Markdown table, with the command that produced it."""
    lines = [f"`{report['command']}`", "", f"engine = {', '.join(report['rules']) or 'no rules'}",
             ""]
    if report["mode"] == "replay":
        lines += ["| file | system | reduction | prefix stable | cost vs none | OpenAI billed vs "
                  "direct (report gap) | Anthropic billed vs direct (report gap) | median ms |",
                  "|---|---|---:|---:|---:|---:|---:|---:|"]
    else:
        lines += ["| file | system | reduction | message tokens | tool-result tokens "
                  "| evidence retained | invalid | median ms |",
                  "|---|---|---:|---:|---:|---:|---:|---:|"]
    for file, result in report["files"].items():
        for name, s in result["systems"].items():
            red = _pct(s["reduction"].get(PRIMARY))
            if report["mode"] == "replay":
                r = s["replay"]
                cost = "-" if r["cost_vs_none"] is None else f"{r['cost_vs_none']:.2f}x"
                bills = r.get("billing", {})
                lines.append(f"| {file} | {name} | {red} | {_pct(r['prefix_stability_mean'])} "
                             f"| {cost} | {_billed(bills.get('openai'))} "
                             f"| {_billed(bills.get('anthropic'))} | {_ms(s['latency_ms'])} |")
            else:
                msgs = _pct(s["reduction"].get("messages"))
                tools = _pct(s["reduction"].get("tool_results"))
                lines.append(f"| {file} | {name} | {red} | {msgs} | {tools} | {_retention(s)} "
                             f"| {s['invalid']} | {_ms(s['latency_ms'])} |")
    return "\n".join(lines) + "\n"
