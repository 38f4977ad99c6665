"""Aggregations of ledger rows, shared by ``report``, ``/stats`` and the dashboard.

Costs: each row's actual input is what the upstream billed (``usage``); the original
input is that plus the tokens the rules removed. Cached tokens are priced at the
model's cached rate in both, so the comparison assumes the provider would have cached
the same tokens without the proxy — the shadow and A/B modes measure that instead.
Rows without upstream usage fall back to the proxy's own counts.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable

from proxy.pricing import price_for


def row_costs(row: dict[str, Any]) -> tuple[float, float] | None:
    """(original, actual) cost of one ledger row, or None if the model has no price."""
    price = price_for(row.get("model") or "")
    if price is None:
        return None
    saved = 0 if row.get("arm") == "shadow" else (row.get("tokens_original") or 0) - (row.get("tokens_sent") or 0)
    prompt = row.get("prompt_tokens")
    if prompt is None:
        prompt = row.get("tokens_sent") or 0
    cached = min(row.get("cached_tokens") or 0, prompt)
    out = (row.get("completion_tokens") or 0) * price.output
    actual = (prompt - cached) * price.input + cached * price.cached_input + out
    original = (prompt + saved - cached) * price.input + cached * price.cached_input + out
    return original, actual


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

    @property
    def saving_pct(self) -> float:
        return 100.0 * (1 - self.cost_actual / self.cost_original) if self.cost_original else 0.0

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
        costs = row_costs(row)
        if costs is None:
            self.priced = False
        else:
            self.cost_original += costs[0]
            self.cost_actual += costs[1]

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["saving_pct"] = round(self.saving_pct, 3)
        d["token_saving_pct"] = round(self.token_saving_pct, 3)
        return d


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


def slowest(rows: Iterable[dict[str, Any]], n: int = 10) -> list[dict[str, Any]]:
    top = sorted(rows, key=lambda r: -(r.get("proxy_ms") or 0.0))[:n]
    return [{k: r.get(k) for k in ("id", "ts", "session", "model", "arm", "proxy_ms", "upstream_ms",
                                   "tokens_original", "tokens_sent", "status")} for r in top]
