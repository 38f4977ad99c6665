"""``context-engine report``: the bill before and after, from the ledger.

``--by model|rule|session|day|api|replica``, ``--format table|json|csv``; the A/B comparison is
added when the ledger holds ``ab`` rows. See ``proxy/billing/row_bill.py`` for the cost model:
the original cost is an *estimate* (counterfactual cache use) or *billed*; the actual
cost is always *billed*.
"""

from __future__ import annotations

import csv
import io
import json
import re
import time
from datetime import UTC, datetime
from typing import Any

from context_engine.proxy.reporting import ab_compare, epochs
from context_engine.proxy.reporting.aggregate import (
    Totals,
    by_rule,
    cache_breaks,
    overall,
    totals_by,
)

BY = ("model", "rule", "session", "day")
FORMATS = ("table", "json", "csv")


def parse_since(value: str | None, now: float | None = None) -> float | None:
    """``30m``, ``24h``, ``7d`` ago, or an ISO date/time (UTC if no zone)."""
    if not value:
        return None
    now = time.time() if now is None else now
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd])", value.strip())
    if m:
        scale = {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
        return now - float(m.group(1)) * scale
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"--since: {value!r} is neither a duration (30m, 24h, 7d) nor an ISO date") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def build(rows: list[dict[str, Any]], by: str) -> dict[str, Any]:
    """The report as data: overall money view, the breakdown, fail-open share, A/B."""
    total = overall(rows)
    data: dict[str, Any] = {
        "by": by,
        "overall": total.as_dict(),
        "failed_open_share": total.failed_open / total.requests if total.requests else 0.0,
        "cache_breaks": cache_breaks(rows),
    }
    if by == "rule":
        data["rows"] = [r.as_dict() for r in by_rule(rows)]
    else:
        data["rows"] = [t.as_dict() for t in totals_by(rows, by)]
    if any(r.get("mode") == "ab" for r in rows):
        data["ab"] = ab_compare.compare(rows)
    compacted = epochs.by_session(rows)
    if compacted:
        data["epochs"] = [s.as_dict() for s in compacted]
    recalled = [r for r in rows if r.get("recall_rounds")]
    if recalled:
        data["recall"] = {
            "requests": len(recalled), "rounds": sum(int(r["recall_rounds"]) for r in recalled),
            "prompt_tokens": sum(int(r.get("recall_prompt_tokens") or 0) for r in recalled),
            "completion_tokens": sum(int(r.get("recall_completion_tokens") or 0) for r in recalled),
            "tokens_saved": total.tokens_original - total.tokens_sent}
    return data


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """A text cell a spreadsheet would run as a formula (``=``, ``+``, ``-``, ``@``, tab,
    CR first) gets a leading ``'``; numbers stay numbers."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def to_csv(data: dict[str, Any]) -> str:
    out = io.StringIO()
    rows = data["rows"]
    if rows:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows({k: csv_cell(v) for k, v in row.items()} for row in rows)
    return out.getvalue()


def to_json(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, sort_keys=True)


def _money(t: dict[str, Any]) -> str:
    if not t["priced"]:
        return "no price"
    return f"${t['cost_original']:.4f} ({t['cost_original_basis']}) → ${t['cost_actual']:.4f} (billed)"


def _bill_lines(o: dict[str, Any]) -> list[str]:
    """How the original was priced, the estimate's own check, misses and bad input."""
    lines = [f"original cost: {o['original_estimate']} requests estimated (what the original would "
             f"have cached), {o['original_billed']} billed (the original was sent)"
             + (f", {o['original_assumed']} assumed from the rewrite's cache hits (older rows)"
                if o["original_assumed"] else "")]
    if o["check_requests"]:
        lines.append(f"estimate check: on {o['check_requests']} requests that sent the original, "
                     f"the estimate was {o['check_error_pct']:+.1f}% off the bill")
    if o["cache_breaks"] or o["prefix_kept_tokens"]:
        lines.append(f"prefix: {o['prefix_kept_tokens']:,} tokens kept from each session's previous "
                     f"request; {o['cache_breaks']} requests broke it (by cause below)")
    if o["provider_misses"]:
        lines.append(f"provider missed {o['provider_misses']} cache hits the proxy had preserved "
                     f"({o['provider_missed_tokens']:,} tokens)")
    if o["cache_notes"]:
        lines.append(f"{o['cache_notes']} requests with odd cache input or usage (passed through; "
                     f"see the ledger's cache_notes)")
    return lines


def render(data: dict[str, Any]) -> list[Any]:
    """Rich renderables: the breakdown table, the overall line, and A/B if present.
    Strings from the ledger (models, sessions, rules) go in as ``Text``: never markup."""
    from rich.table import Table
    from rich.text import Text

    by = data["by"]
    table = Table(title=f"Context Engine — bill before and after, by {by}")
    if by == "rule":
        for col in ("rule", "tokens saved", "fired", "runs", "failures", "would save (shadow)", "ms/run"):
            table.add_column(col, justify="left" if col == "rule" else "right")
        for r in data["rows"]:
            table.add_row(Text(str(r["rule"])), f"{r['saved']:,}", str(r["fired"]), str(r["runs"]),
                          str(r["failures"]), f"{r['would_save']:,}",
                          f"{r['ms_total'] / r['runs']:.2f}" if r["runs"] else "-")
    else:
        for col in (by, "requests", "input tokens original → sent", "cached",
                    "cost original → actual", "saving"):
            table.add_column(col, justify="left" if col == by else "right")
        for t in data["rows"]:
            table.add_row(Text(str(t["key"])), str(t["requests"]),
                          f"{t['tokens_original']:,} → {t['tokens_sent']:,} (-{t['token_saving_pct']:.1f}%)",
                          f"{t['cached_tokens']:,}", _money(t),
                          f"{t['saving_pct']:.1f}%" if t["priced"] else "-")
    o = data["overall"]
    lines: list[Any] = [table, (
        f"all: {o['requests']} requests, input tokens {o['tokens_original']:,} → {o['tokens_sent']:,}, "
        f"cost {_money(o)} ({o['saving_pct']:.1f}% saved); failed open: "
        f"{100 * data['failed_open_share']:.2f}% of requests"
        + (f"; shadow rewrites would have saved {o['would_save']:,} tokens" if o["would_save"] else ""))]
    lines += _bill_lines(o)
    if "recall" in data:
        rc = data["recall"]
        lines.append(f"recall: {rc['rounds']} follow-up calls in {rc['requests']} requests cost "
                     f"{rc['prompt_tokens']:,} input + {rc['completion_tokens']:,} output tokens "
                     f"(included above), against {rc['tokens_saved']:,} input tokens the rules saved")
    if data.get("epochs"):
        lines.append(_epochs_table(data["epochs"]))
    if data.get("cache_breaks"):
        lines.append(_breaks_table(data["cache_breaks"]))
    if "ab" in data:
        lines.append(_ab_table(data["ab"]))
        lines += _ab_lines(data["ab"])
    return lines


def _ab_lines(ab: dict[str, Any]) -> list[Any]:
    """The per-session comparison (``ab_verdict.py``) and its verdict."""
    from rich.text import Text

    j = ab.get("judged")
    if not j:
        return []
    lines: list[Any] = []
    for s in j["signals"].values():
        if s["diff"] is not None:
            ci = f" (95% CI {s['ci'][0]:+.2f} … {s['ci'][1]:+.2f})" if s["ci"] else ""
            lines.append(Text(f"A/B {s['label']}: rewrite {s['rewrite']:.2f}, passthrough "
                              f"{s['passthrough']:.2f}, difference {s['diff']:+.2f}{ci}"))
    lines.append(Text(f"A/B verdict: {j['verdict']}"))
    return lines


def _epochs_table(sessions: list[dict[str, Any]]) -> Any:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="Compaction epochs by session (input-token equivalents: a miss re-bills "
                        "the prefix once; each later request reads the cleared tokens no more)")
    for col in ("session", "requests", "epochs", "tokens cleared", "miss", "saved since", "net"):
        table.add_column(col, justify="left" if col == "session" else "right")
    for s in sessions[:20]:
        table.add_row(escape(s["session"]) + (" (prices assumed)" if s["assumed"] else ""),
                      str(s["requests"]), str(s["epochs"]), f"{s['cleared_tokens']:,}",
                      f"{s['miss_tokens']:,.0f}", f"{s['saved_tokens']:,.0f}",
                      f"{s['net_tokens']:+,.0f}")
    return table


def _breaks_table(breaks: list[dict[str, Any]]) -> Any:
    from rich.table import Table
    from rich.text import Text

    table = Table(title="Cache breaks by rule (the sent prefix changed against the session's previous request)")
    for col in ("cause", "requests", "tokens sent after the break"):
        table.add_column(col, justify="left" if col == "cause" else "right")
    for b in breaks:
        table.add_row(Text(str(b["cause"])), str(b["breaks"]), f"{b['tokens_after_break']:,}")
    return table


def _ab_table(ab: dict[str, Any]) -> Any:
    from rich.table import Table
    from rich.text import Text

    table = Table(title="A/B: what the provider billed, per arm (sessions are the unit; measured)")
    for col in ("arm", "sessions", "requests", "$/request", "prompt tok/request", "errors",
                "length/filter", "turns/session", "tool retries/request"):
        table.add_column(col, justify="left" if col == "arm" else "right")
    def fmt(v: Any, f: str) -> str:
        return "-" if v is None else format(v, f)

    for arm, a in ab["arms"].items():
        table.add_row(Text(str(arm)), str(a["sessions"]), str(a["requests"]), fmt(a["cost_per_request"], ".6f"),
                      fmt(a["prompt_tokens_per_request"], ",.0f"), fmt(a["error_share"], ".1%"),
                      fmt(a["cut_share"], ".1%"), fmt(a["turns_per_session"], ".1f"),
                      fmt(a["tool_retries_per_request"], ".3f"))
    d = ab["cost_diff"]
    if d["ci_low"] is not None:
        table.caption = (f"rewrite − passthrough, $/request: {d['diff']:+.6f} "
                         f"(95% CI {d['ci_low']:+.6f} … {d['ci_high']:+.6f})")
    return table


__all__ = ["BY", "FORMATS", "Totals", "build", "parse_since", "render", "to_csv", "to_json"]
