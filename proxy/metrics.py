"""``GET /metrics``: Prometheus text format, one registry per app (no module state)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from proxy.ledger import LedgerRow

MS_BUCKETS = (0.25, 0.5, 1, 2, 5, 10, 20, 50, 100, 250, 1000)
UPSTREAM_BUCKETS = (10, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000)
SHARE_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("context_engine_requests", "Chat-completions requests",
                                ["model", "arm", "status"], registry=r)
        self.tokens_before = Counter("context_engine_tokens_before", "Input tokens as the client sent them",
                                     ["model"], registry=r)
        self.tokens_after = Counter("context_engine_tokens_after", "Input tokens sent upstream",
                                    ["model"], registry=r)
        self.rule_saved = Counter("context_engine_rule_saved_tokens", "Tokens removed, per rule",
                                  ["rule"], registry=r)
        self.rule_failures = Counter("context_engine_rule_failures", "Rules that raised and were skipped",
                                     ["rule"], registry=r)
        self.failed_open = Counter("context_engine_failed_open", "Rewrites replaced by the original",
                                   registry=r)
        self.cached = Counter("context_engine_cached_tokens", "Cache-read input tokens the upstream reported",
                              ["model"], registry=r)
        self.proxy_ms = Histogram("context_engine_proxy_added_ms", "Milliseconds the proxy adds before forwarding",
                                  buckets=MS_BUCKETS, registry=r)
        self.upstream_ms = Histogram("context_engine_upstream_ms", "Upstream milliseconds to the end of the body",
                                     buckets=UPSTREAM_BUCKETS, registry=r)
        self.utilization = Histogram("context_engine_context_utilization",
                                     "Share of data-zone tokens the response drew on",
                                     buckets=SHARE_BUCKETS, registry=r)
        self.oscillation = Histogram("context_engine_context_oscillation",
                                     "Share of injected snippets changed from the previous turn",
                                     buckets=SHARE_BUCKETS, registry=r)

    def observe(self, row: LedgerRow) -> None:
        model = row.model or "(none)"
        self.requests.labels(model, row.arm, str(row.status)).inc()
        self.tokens_before.labels(model).inc(row.tokens_original)
        self.tokens_after.labels(model).inc(row.tokens_original if row.arm == "shadow" else row.tokens_sent)
        for entry in row.journal:
            if entry.get("error"):
                self.rule_failures.labels(entry["rule"]).inc()
        if row.arm != "shadow":
            for rule, saved in row.rule_savings.items():
                if saved > 0:
                    self.rule_saved.labels(rule).inc(saved)
        if row.failed_open:
            self.failed_open.inc()
        if row.cached_tokens:
            self.cached.labels(model).inc(row.cached_tokens)
        self.proxy_ms.observe(row.proxy_ms)
        self.upstream_ms.observe(row.upstream_ms)
        if row.utilization is not None:
            self.utilization.observe(row.utilization)
        if row.oscillation is not None:
            self.oscillation.observe(row.oscillation)

    def render(self) -> Any:
        return generate_latest(self.registry)
