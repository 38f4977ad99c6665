"""``context-engine report``: the bill before and after, per model, from the ledger.

For each request the actual input is what the upstream billed (``usage``), and the
original input is that plus the tokens the rules removed. Cached tokens are priced at
the model's cached rate in both, so the comparison assumes the provider would have
cached the same tokens without the proxy (the shadow/A-B modes measure that instead).
Requests without upstream usage fall back to the proxy's own token counts.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from proxy.pricing import price_for


@dataclass
class ModelTotals:
    model: str
    requests: int = 0
    tokens_original: int = 0
    tokens_sent: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    cost_original: float = 0.0
    cost_actual: float = 0.0
    priced: bool = True
    failed_open: int = 0
    rule_savings: dict[str, int] = field(default_factory=dict)

    @property
    def saving_pct(self) -> float:
        return 100.0 * (1 - self.cost_actual / self.cost_original) if self.cost_original else 0.0

    @property
    def token_saving_pct(self) -> float:
        return 100.0 * (1 - self.tokens_sent / self.tokens_original) if self.tokens_original else 0.0


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
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def row_costs(row: dict[str, Any]) -> tuple[float, float] | None:
    """(original, actual) cost of one ledger row, or None if the model has no price."""
    price = price_for(row.get("model") or "")
    if price is None:
        return None
    saved = (row.get("tokens_original") or 0) - (row.get("tokens_sent") or 0)
    prompt = row.get("prompt_tokens")
    if prompt is None:
        prompt = row.get("tokens_sent") or 0
    cached = min(row.get("cached_tokens") or 0, prompt)
    out = (row.get("completion_tokens") or 0) * price.output
    actual = (prompt - cached) * price.input + cached * price.cached_input + out
    original = (prompt + saved - cached) * price.input + cached * price.cached_input + out
    return original, actual


def totals_by_model(rows: list[dict[str, Any]]) -> list[ModelTotals]:
    import json

    by: dict[str, ModelTotals] = {}
    for row in rows:
        t = by.setdefault(row.get("model") or "", ModelTotals(row.get("model") or ""))
        t.requests += 1
        t.tokens_original += row.get("tokens_original") or 0
        t.tokens_sent += row.get("tokens_sent") or 0
        t.cached_tokens += row.get("cached_tokens") or 0
        t.completion_tokens += row.get("completion_tokens") or 0
        t.failed_open += 1 if row.get("failed_open") else 0
        for rule, saved in json.loads(row.get("rule_savings") or "{}").items():
            t.rule_savings[rule] = t.rule_savings.get(rule, 0) + int(saved)
        costs = row_costs(row)
        if costs is None:
            t.priced = False
        else:
            t.cost_original += costs[0]
            t.cost_actual += costs[1]
    return sorted(by.values(), key=lambda t: t.model)


def render(totals: list[ModelTotals]) -> Any:
    from rich.table import Table

    table = Table(title="Context Engine — bill before and after")
    for col in ("model", "requests", "input tokens original → sent", "cached",
                "cost original → actual", "saving"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for t in totals:
        cost = (f"${t.cost_original:.4f} → ${t.cost_actual:.4f}" if t.priced else "no price")
        table.add_row(t.model or "(none)", str(t.requests),
                      f"{t.tokens_original:,} → {t.tokens_sent:,} (-{t.token_saving_pct:.1f}%)",
                      f"{t.cached_tokens:,}", cost,
                      f"{t.saving_pct:.1f}%" if t.priced else "-")
    return table
