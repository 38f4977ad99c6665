"""``GET /stats``: the ledger summarised as JSON (the dashboard reads this)."""

from __future__ import annotations

import statistics
import time
from typing import Any

from context_engine.proxy.recording.ledger import Ledger, read_rows
from context_engine.proxy.reporting import ab_compare, epochs, quality
from context_engine.proxy.reporting.aggregate import (
    by_rule,
    cache_breaks,
    overall,
    slowest,
    totals_by,
)

FLUSH_WAIT = 1.0  # seconds /stats waits for queued rows; it never blocks longer


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def stats(rows: list[dict[str, Any]], since: float | None) -> dict[str, Any]:
    total = overall(rows)
    stamps = [r.get("ts") or 0.0 for r in rows]
    span = (max(stamps) - min(stamps)) if stamps else 0.0
    return {
        "generated_at": time.time(),
        "since": since,
        "overall": total.as_dict(),
        "failed_open_share": total.failed_open / total.requests if total.requests else 0.0,
        "by_model": [t.as_dict() for t in totals_by(rows, "model")],
        "by_api": [t.as_dict() for t in totals_by(rows, "api")],
        "by_replica": [t.as_dict() for t in totals_by(rows, "replica")],
        "by_agent": [t.as_dict() for t in totals_by(rows, "agent")],
        "sessions": len({r.get("session") for r in rows}),
        "by_rule": [r.as_dict() for r in by_rule(rows)],
        "cache_breaks": cache_breaks(rows),
        "over_time": {"bucket": "hour" if span <= 3 * 86400 else "day",
                      "rows": [t.as_dict() for t in totals_by(rows, "hour" if span <= 3 * 86400 else "day")]},
        "ab": ab_compare.compare(rows) if any(r.get("mode") == "ab" for r in rows) else None,
        "quality": quality.over_time(rows, "hour" if span <= 3 * 86400 else "day"),
        "slowest": slowest(rows),
        "compaction": {"kinds": epochs.kinds(rows),
                       "sessions": [s.as_dict() for s in epochs.by_session(rows)[:20]]},
        "context": {
            "utilization_mean": _mean([r["utilization"] for r in rows if r.get("utilization") is not None]),
            "oscillation_mean": _mean([r["oscillation"] for r in rows if r.get("oscillation") is not None]),
        },
    }


def stats_from_ledger(path: str, since: float | None,
                      where: dict[str, str] | None = None) -> dict[str, Any]:
    """``where``: only the rows whose columns hold these values (``agent``, ``project``)."""
    rows = read_rows(path, since)
    if where:
        rows = [r for r in rows if all((r.get(k) or "") == v for k, v in where.items())]
    return stats(rows, since)


def stats_after_flush(ledger: Ledger, since: float | None, wait: float = FLUSH_WAIT,
                      where: dict[str, str] | None = None) -> dict[str, Any]:
    """The stats after a bounded wait for queued rows; ``ledger`` says whether all were in."""
    complete = ledger.flush(wait)
    data = stats_from_ledger(ledger.path, since, where)
    data["ledger"] = {**ledger.health(), "complete": complete}
    return data
