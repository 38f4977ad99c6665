"""Aggregations of ledger rows, shared by ``report``, ``/stats`` and the dashboard.

Costs come from ``proxy/billing/row_bill.py``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

from context_engine.proxy.billing.row_bill import BASES, row_bill


@dataclass
class Totals:
    key: str
    requests: int = 0
    tokens_original: int = 0
    tokens_sent: int = 0
    would_save: int = 0  # shadow rows: tokens the rewrite would have removed
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    cost_original: float = 0.0
    cost_actual: float = 0.0
    priced: bool = True
    failed_open: int = 0
    errors: int = 0
    proxy_ms_total: float = 0.0
    cache_write_tokens: int = 0
    est_cached_original: int = 0  # counterfactual cache reads of the originals
    original_estimate: int = 0  # rows whose original cost is the estimate
    original_billed: int = 0  # … is the bill (the original was sent)
    original_assumed: int = 0  # … assumes the rewrite's cache hits (old rows)
    check_requests: int = 0  # rows that sent the original and carry an estimate
    check_estimate: float = 0.0
    check_billed: float = 0.0
    prefix_kept_tokens: int = 0
    cache_breaks: int = 0
    provider_misses: int = 0
    provider_missed_tokens: int = 0
    cache_notes: int = 0  # rows with bad cache input (markers, usage) noted

    @property
    def saving_pct(self) -> float:
        return 100.0 * (1 - self.cost_actual / self.cost_original) if self.cost_original else 0.0

    @property
    def check_error_pct(self) -> float | None:
        """How far the estimate was from the bill where the original was sent (%)."""
        if not self.check_billed:
            return None
        return 100.0 * (self.check_estimate / self.check_billed - 1)

    @property
    def token_saving_pct(self) -> float:
        return 100.0 * (1 - self.tokens_sent / self.tokens_original) if self.tokens_original else 0.0

    def add(self, row: dict[str, Any]) -> None:
        self.requests += 1
        shadow = row.get("arm") == "shadow"
        self.tokens_original += row.get("tokens_original") or 0
        self.tokens_sent += (row.get("tokens_original") if shadow else row.get("tokens_sent")) or 0
        if shadow:
            self.would_save += (row.get("tokens_original") or 0) - (row.get("tokens_sent") or 0)
        self.prompt_tokens += row.get("prompt_tokens") or 0
        self.cached_tokens += row.get("cached_tokens") or 0
        self.completion_tokens += row.get("completion_tokens") or 0
        self.failed_open += 1 if row.get("failed_open") else 0
        self.errors += 1 if (row.get("status") or 0) >= 400 else 0
        self.proxy_ms_total += row.get("proxy_ms") or 0.0
        self.cache_write_tokens += row.get("cache_write_tokens") or 0
        self.est_cached_original += row.get("est_cached_original") or 0
        self.prefix_kept_tokens += row.get("prefix_kept_tokens") or 0
        self.cache_breaks += row.get("prefix_break_index") is not None
        self.provider_misses += bool(row.get("provider_missed_tokens"))
        self.provider_missed_tokens += row.get("provider_missed_tokens") or 0
        self.cache_notes += bool(row.get("cache_notes"))
        bill = row_bill(row)
        if bill is None:
            self.priced = False
            return
        self.cost_original += bill.original
        self.cost_actual += bill.actual
        setattr(self, "original_" + bill.basis, getattr(self, "original_" + bill.basis) + 1)
        if bill.original_estimate is not None:
            self.check_requests += 1
            self.check_estimate += bill.original_estimate
            self.check_billed += bill.actual

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["saving_pct"] = round(self.saving_pct, 3)
        d["token_saving_pct"] = round(self.token_saving_pct, 3)
        err = self.check_error_pct
        d["check_error_pct"] = None if err is None else round(err, 3)
        d["cost_original_basis"] = self.basis
        return d

    @property
    def basis(self) -> str:
        """How the original cost was found: estimate, billed, assumed, or mixed."""
        used = [b for b in BASES if getattr(self, "original_" + b)]
        return used[0] if len(used) == 1 else ("mixed" if used else "-")


def _day(row: dict[str, Any]) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(row.get("ts") or 0))


def _hour(row: dict[str, Any]) -> str:
    return time.strftime("%Y-%m-%dT%H:00Z", time.gmtime(row.get("ts") or 0))


KEYS: dict[str, Callable[[dict[str, Any]], str]] = {
    "model": lambda r: r.get("model") or "(none)",
    "session": lambda r: r.get("session") or "(none)",
    "day": _day,
    "hour": _hour,
    "arm": lambda r: r.get("arm") or "rewrite",
    "api": lambda r: r.get("api") or "chat",
    "replica": lambda r: r.get("replica") or "(none)",
    "agent": lambda r: r.get("agent") or "(untagged)",
    "project": lambda r: r.get("project") or "(untagged)",
}


def totals_by(rows: Iterable[dict[str, Any]], by: str) -> list[Totals]:
    key = KEYS[by]
    out: dict[str, Totals] = {}
    for row in rows:
        k = key(row)
        out.setdefault(k, Totals(k)).add(row)
    return [out[k] for k in sorted(out)]


def overall(rows: Iterable[dict[str, Any]]) -> Totals:
    t = Totals("all")
    for row in rows:
        t.add(row)
    return t


@dataclass
class RuleTotals:
    rule: str
    saved: int = 0
    fired: int = 0  # requests where the rule removed tokens
    runs: int = 0
    failures: int = 0
    ms_total: float = 0.0
    would_save: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def by_rule(rows: Iterable[dict[str, Any]]) -> list[RuleTotals]:
    out: dict[str, RuleTotals] = {}
    for row in rows:
        shadow = row.get("arm") == "shadow"
        for entry in json.loads(row.get("journal") or "[]"):
            t = out.setdefault(entry["rule"], RuleTotals(entry["rule"]))
            t.runs += 1
            t.ms_total += entry.get("ms") or 0.0
            if entry.get("error"):
                t.failures += 1
                continue
            saved = (entry.get("before") or 0) - (entry.get("after") or 0)
            if row.get("failed_open"):
                saved = 0
            if shadow:
                t.would_save += saved
            else:
                t.saved += saved
            t.fired += saved > 0
    return [out[k] for k in sorted(out)]


def cache_breaks(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Requests whose sent prefix broke against the session's previous one, by cause
    (``client``, a rule name, ``failed_open``), with the tokens sent after the break."""
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        if row.get("prefix_break_index") is None:
            continue
        cause = row.get("prefix_break_rule") or "unattributed"
        t = out.setdefault(cause, {"cause": cause, "breaks": 0, "tokens_after_break": 0})
        t["breaks"] += 1
        sent = row.get("prompt_tokens") or row.get("tokens_sent") or 0
        t["tokens_after_break"] += max(0, sent - (row.get("prefix_kept_tokens") or 0))
    return sorted(out.values(), key=lambda t: (-t["breaks"], t["cause"]))


def slowest(rows: Iterable[dict[str, Any]], n: int = 10) -> list[dict[str, Any]]:
    top = sorted(rows, key=lambda r: -(r.get("proxy_ms") or 0.0))[:n]
    return [{k: r.get(k) for k in ("id", "ts", "session", "model", "arm", "proxy_ms", "upstream_ms",
                                   "tokens_original", "tokens_sent", "status")} for r in top]
