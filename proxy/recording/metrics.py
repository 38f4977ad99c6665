"""``GET /metrics``: Prometheus text format, one registry per app (no module state).

Label values come from requests (``model``) and rules: each is cleaned (surrogates
escaped, at most ``MAX_LABEL_CHARS``) and each label keeps at most ``MAX_LABEL_VALUES``
distinct values; later new ones are counted under ``"other"``, so neither a bad value
nor a flood of distinct ones can break or bloat the export. Only a request the upstream
accepted (a status below 400) may claim a new ``model`` value: one it refused (a made-up
key, a made-up model) counts under its model if that already holds a slot, else under
``"(not accepted)"``, so refused requests with random model names cannot take the slots
the real models need.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from context_engine.proxy.billing.metrics import BillMetrics
from context_engine.proxy.recording.ledger import LedgerRow
from context_engine.proxy.sanitize import clean_text

MS_BUCKETS = (0.25, 0.5, 1, 2, 5, 10, 20, 50, 100, 250, 1000)
UPSTREAM_BUCKETS = (10, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000)
SHARE_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1.0)
MAX_LABEL_VALUES = 100
MAX_LABEL_CHARS = 100
OVERFLOW = "other"
NOT_ACCEPTED = "(not accepted)"  # a refused request's model that holds no slot yet


class LabelValues:
    """Cleans label values and caps how many distinct ones each label name takes."""

    def __init__(self, cap: int = MAX_LABEL_VALUES) -> None:
        self.cap = cap
        self._seen: dict[str, set[str]] = {}

    def __call__(self, label: str, value: Any, claim: bool = True) -> str:
        """The value to export; a new one takes a slot only when ``claim`` is set (else it
        is ``NOT_ACCEPTED``)."""
        text = clean_text(value if isinstance(value, str) else str(value))[:MAX_LABEL_CHARS]
        seen = self._seen.setdefault(label, set())
        if text in seen:
            return text
        if not claim:
            return NOT_ACCEPTED
        if len(seen) >= self.cap:
            return OVERFLOW
        seen.add(text)
        return text


class Metrics:
    def __init__(self, max_label_values: int = MAX_LABEL_VALUES) -> None:
        self.label = LabelValues(max_label_values)
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("context_engine_requests", "Conversation requests, per wire API",
                                ["model", "arm", "status", "api"], registry=r)
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
        self.bill = BillMetrics(r, self.label)
        self.rereads = Counter("context_engine_rereads", "Tool calls repeating a result the proxy "
                               "cleared or shortened, by the rule that changed it", ["rule"], registry=r)
        self.reread_tokens = Counter("context_engine_reread_tokens", "Tokens of those re-read results",
                                     ["rule"], registry=r)
        self.repeat_reads = Counter("context_engine_repeat_reads", "Tool calls repeating a result "
                                    "sent whole (the agent's base rate)", registry=r)
        self.recall_calls = Counter("context_engine_recall_calls", "context_recall calls answered",
                                    registry=r)
        self.recall_tokens = Counter("context_engine_recall_tokens", "Tokens recall answers brought back",
                                     registry=r)
        self.format_errors = Counter("context_engine_format_errors", "Tool results reading like "
                                     "a tool-call format error", ["arm"], registry=r)
        self.rewrite_errors = Counter("context_engine_rewrite_errors", "4xx answers to requests "
                                      "the proxy changed", registry=r)

    def watch(self, name: str, help_text: str, read: Callable[[], float]) -> None:
        """A gauge read when /metrics is scraped (ledger drops, shadow skips, store state)."""
        Gauge(name, help_text, registry=self.registry).set_function(read)

    def observe(self, row: LedgerRow) -> None:
        accepted = 200 <= _count(row.status) < 400
        model = self.label("model", row.model or "(none)", claim=accepted)
        self.requests.labels(model, self.label("arm", row.arm), self.label("status", row.status),
                             self.label("api", row.api)).inc()
        self.tokens_before.labels(model).inc(_count(row.tokens_original))
        self.tokens_after.labels(model).inc(_count(row.tokens_original if row.arm == "shadow" else row.tokens_sent))
        for entry in row.journal:
            if entry.get("error"):
                self.rule_failures.labels(self.label("rule", entry.get("rule"))).inc()
        if row.arm != "shadow":
            for rule, saved in row.rule_savings.items():
                if _count(saved) > 0:
                    self.rule_saved.labels(self.label("rule", rule)).inc(_count(saved))
        if row.failed_open:
            self.failed_open.inc()
        if _count(row.cached_tokens):
            self.cached.labels(model).inc(_count(row.cached_tokens))
        self.proxy_ms.observe(row.proxy_ms)
        self.upstream_ms.observe(row.upstream_ms)
        if row.utilization is not None:
            self.utilization.observe(row.utilization)
        if row.oscillation is not None:
            self.oscillation.observe(row.oscillation)
        if _count(row.status) < 400:  # a refused request was not billed
            self.bill.observe(row)
        self.observe_quality(row)

    def observe_quality(self, row: LedgerRow) -> None:
        """The behaviour signals (``proxy/engine/rereads.py``)."""
        for rule, (n, tokens) in row.reread_rules.items():
            label = self.label("rule", rule)
            self.rereads.labels(label).inc(_count(n))
            self.reread_tokens.labels(label).inc(_count(tokens))
        self.repeat_reads.inc(_count(row.repeat_reads))
        self.recall_calls.inc(_count(row.recall_calls))
        self.recall_tokens.inc(_count(row.recall_tokens))
        if row.format_errors:
            self.format_errors.labels(self.label("arm", row.arm)).inc(_count(row.format_errors))
        if row.rewrite_error:
            self.rewrite_errors.inc()

    def render(self) -> Any:
        return generate_latest(self.registry)


def _count(value: Any) -> float:
    """A counter increment: a finite non-negative number (upstream usage can be anything)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0.0
    return float(value) if 0 <= value < float("inf") else 0.0
