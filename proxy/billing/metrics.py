"""The honest bill on ``/metrics``: costs labelled estimate or billed, cache writes,
prefix kept, cache breaks by cause, provider misses and odd cache input.

Label values come through the caller's capped labeller (``Label``); ``Metrics`` leaves
out requests the upstream refused (status 400 and up): nothing was billed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from context_engine.proxy.billing.row_bill import row_bill

Label = Callable[[str, Any], str]  # (label name, value) -> the value exported


class BillMetrics:
    def __init__(self, registry: CollectorRegistry, label: Label) -> None:
        r, self.label = registry, label
        self.cost = Counter("context_engine_cost_usd",
                            "Input+output cost in USD: actual (billed), original (estimate: what the "
                            "client's requests would have been billed with their own cache hits; or "
                            "billed where the original was sent)", ["model", "cost", "basis"], registry=r)
        self.writes = Counter("context_engine_cache_write_tokens", "Cache-write input tokens the upstream reported",
                              ["model"], registry=r)
        self.kept = Counter("context_engine_prefix_kept_tokens",
                            "Sent tokens shared with the session's previous sent request", ["model"], registry=r)
        self.breaks = Counter("context_engine_cache_breaks",
                              "Requests whose sent prefix broke, by cause (client, a rule, failed_open)",
                              ["cause"], registry=r)
        self.missed = Counter("context_engine_provider_missed_tokens",
                              "Cache reads the provider did not report on a prefix the proxy kept",
                              ["model"], registry=r)
        self.notes = Counter("context_engine_cache_input_notes",
                             "Requests with odd cache markers or usage (passed through)", registry=r)

    def observe(self, row: Any) -> None:
        model = self.label("model", row.model or "(none)")
        bill = row_bill(vars(row))
        if bill is not None:
            self.cost.labels(model, "actual", "billed").inc(bill.actual)
            self.cost.labels(model, "original", bill.basis).inc(bill.original)
        if row.cache_write_tokens:
            self.writes.labels(model).inc(row.cache_write_tokens)
        if row.prefix_kept_tokens:
            self.kept.labels(model).inc(row.prefix_kept_tokens)
        if row.prefix_break_index is not None:
            self.breaks.labels(self.label("cause", row.prefix_break_rule or "unattributed")).inc()
        if row.provider_missed_tokens:
            self.missed.labels(model).inc(row.provider_missed_tokens)
        if row.cache_notes:
            self.notes.inc()
