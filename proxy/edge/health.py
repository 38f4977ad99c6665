"""What ``/healthz`` and ``/metrics`` say about the parts that can fail behind a request:
the ledger writer (alive? writing?), the store (reachable? circuit open?) and the shadow
backlog. ``status`` is ``"degraded"`` with one reason per failing part; the proxy still
answers requests either way (the store's rules fail open, rows wait in the queue).
"""

from __future__ import annotations

from typing import Any

from context_engine.proxy.recording.finish import Finisher
from context_engine.proxy.recording.ledger import Ledger


def store_health(store: Any) -> dict[str, Any]:
    read = getattr(store, "health", None)
    return read() if callable(read) else {"state": "ok", "kind": type(store).__name__}


def health(ledger: Ledger, store: Any, finisher: Finisher) -> dict[str, Any]:
    reasons = []
    led = ledger.health()
    if led["state"] == "dead":
        reasons.append("ledger writer is not running: rows are not being recorded")
    elif led["state"] == "failing":
        reasons.append(f"ledger writes are failing: {led['last_error']}")
    st = store_health(store)
    if st["state"] != "ok":
        reasons.append(f"store is {st['state']}: {st.get('last_error', '')}".rstrip(": "))
    return {"status": "degraded" if reasons else "ok", "reasons": reasons, "ledger": led,
            "store": st, "shadow_skipped": finisher.skipped_shadow,
            "finish_skipped": finisher.skipped_measure}


def watch(metrics: Any, ledger: Ledger, store: Any, finisher: Finisher) -> None:
    """Gauges read at scrape time."""
    metrics.watch("context_engine_ledger_dropped_rows", "Ledger rows dropped after failed writes",
                  lambda: ledger.dropped)
    metrics.watch("context_engine_ledger_queued_rows", "Ledger rows waiting for the writer",
                  lambda: ledger.health()["queued"])
    metrics.watch("context_engine_ledger_writer_up", "1 while the ledger writer is alive and writing",
                  lambda: float(ledger.health()["state"] == "ok"))
    metrics.watch("context_engine_texts_embedded", "Texts this process sent to the embedder "
                  "(the rest were found in the store)", finisher.engine.embedded)
    metrics.watch("context_engine_shadow_skipped", "Shadow rewrites skipped because the backlog was full",
                  lambda: finisher.skipped_shadow)
    metrics.watch("context_engine_finish_skipped", "Rows recorded without context metrics or "
                  "bill estimate because the finishing backlog was full", lambda: finisher.skipped_measure)
    metrics.watch("context_engine_store_up", "1 while the store answers (0: outage, rules fail open)",
                  lambda: float(store_health(store)["state"] == "ok"))
