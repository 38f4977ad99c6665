"""The A/B comparison: what the provider billed per request in each arm, by session.

Sessions are the unit of assignment, so they are the unit of analysis: each session
contributes its mean actual cost (and tokens) per request. The difference of the arm
means comes with a 95% confidence interval (Welch, normal approximation). Quality
proxies per arm: error share, ``finish_reason`` length/content_filter share, turns
per session, tool-call retries per request. ``judged`` (``ab_verdict.py``) compares the
arms per session on cost and on the behaviour signals, with bootstrap intervals and a
verdict.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from context_engine.proxy.billing.row_bill import row_costs
from context_engine.proxy.reporting import ab_verdict

ARMS = ("rewrite", "passthrough")


def _mean_ci(a: list[float], b: list[float]) -> dict[str, float | None]:
    if len(a) < 2 or len(b) < 2:
        diff = (statistics.fmean(a) - statistics.fmean(b)) if a and b else None
        return {"diff": diff, "ci_low": None, "ci_high": None}
    diff = statistics.fmean(a) - statistics.fmean(b)
    se = math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))
    return {"diff": diff, "ci_low": diff - 1.96 * se, "ci_high": diff + 1.96 * se}


def compare(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Per arm, the bill and quality proxies; ``judged``: cost and harm per session with
    bootstrap intervals, and the verdict (``ab_verdict.py``)."""
    rows = list(rows)
    sessions: dict[str, dict[str, list[dict[str, Any]]]] = {arm: defaultdict(list) for arm in ARMS}
    for row in rows:
        if row.get("mode") == "ab" and row.get("arm") in ARMS:
            sessions[row["arm"]][row.get("session") or ""].append(row)
    per_arm: dict[str, Any] = {}
    cost_means: dict[str, list[float]] = {}
    token_means: dict[str, list[float]] = {}
    for arm in ARMS:
        cost_means[arm], token_means[arm] = [], []
        n_req = errors = cut = retries = 0
        for rs in sessions[arm].values():
            costs = [c[1] for c in map(row_costs, rs) if c is not None]
            if costs:
                cost_means[arm].append(statistics.fmean(costs))
            token_means[arm].append(statistics.fmean(
                float(r["prompt_tokens"] if r.get("prompt_tokens") is not None else r.get("tokens_sent") or 0)
                for r in rs))
            n_req += len(rs)
            errors += sum((r.get("status") or 0) >= 400 for r in rs)
            cut += sum(r.get("finish_reason") in ("length", "content_filter") for r in rs)
            retries += sum(r.get("tool_retries") or 0 for r in rs)
        n_sess = len(sessions[arm])
        per_arm[arm] = {
            "sessions": n_sess, "requests": n_req,
            "cost_per_request": statistics.fmean(cost_means[arm]) if cost_means[arm] else None,
            "prompt_tokens_per_request": statistics.fmean(token_means[arm]) if token_means[arm] else None,
            "error_share": errors / n_req if n_req else None,
            "cut_share": cut / n_req if n_req else None,
            "turns_per_session": n_req / n_sess if n_sess else None,
            "tool_retries_per_request": retries / n_req if n_req else None,
        }
    return {"arms": per_arm, "judged": ab_verdict.judge(list(rows)),
            "cost_diff": _mean_ci(cost_means["rewrite"], cost_means["passthrough"]),
            "prompt_tokens_diff": _mean_ci(token_means["rewrite"], token_means["passthrough"])}
