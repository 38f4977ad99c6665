"""The A/B verdict: what the rules cost per session against what they cost the agent.

Each ``mode: ab`` session is in one arm for its whole life (``proxy/engine/modes.py``).
Per session: the provider's bill (the actual cost of its requests), and the behaviour
signals (``quality.py``): reads (tool calls repeating an earlier result: re-reads of
cleared ones plus repeat reads; the passthrough arm only has the latter, so the
difference is what clearing added), ``context_recall`` calls, turns (requests), and
errors after a rewrite (4xx on a changed request, tool-call format errors). The arms
are compared by session with bootstrap intervals (``bootstrap.py``: fixed seed, so the
same ledger gives the same verdict):

- cost: the ratio of mean cost per session, rewrite over passthrough, and its interval;
- harm: a signal whose difference (rewrite − passthrough) has an interval wholly above 0
  is harm; recall calls are shown (their cost is in the bill) but judge nothing.

"rules cost 0.71x [0.66, 0.77] at +0.4 reads per session [-0.2, 1.1], +0.1 turns per
session [-0.5, 0.8], +0.0 errors per session [0.0, 0.0]: no detectable harm".
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from context_engine.proxy.billing.row_bill import row_costs
from context_engine.proxy.reporting import bootstrap
from context_engine.proxy.reporting.quality import Session, by_session

ARMS = ("rewrite", "passthrough")
MIN_SESSIONS = 2  # per arm, for an interval at all
HARMS = (("reads", "reads per session"), ("turns", "turns per session"),
         ("errors", "errors per session"))
SHOWN = HARMS + (("recall_calls", "recall calls per session"),)


def _values(s: Session) -> dict[str, float]:
    return {"reads": float(s.rereads + s.repeat_reads), "turns": float(s.requests),
            "errors": float(s.rewrite_errors + s.format_errors), "recall_calls": float(s.recall_calls)}


def per_session(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, float]]]:
    """Each arm's sessions: their cost (None: unpriced) and signals."""
    costs: dict[str, float] = defaultdict(float)
    priced: dict[str, bool] = defaultdict(lambda: True)
    ab = [r for r in rows if r.get("mode") == "ab" and r.get("arm") in ARMS]
    for r in ab:
        c = row_costs(r)
        key = str(r.get("session") or "")
        if c is None:
            priced[key] = False
        else:
            costs[key] += c[1]
    out: dict[str, list[dict[str, float]]] = {arm: [] for arm in ARMS}
    for s in by_session(ab):
        values = _values(s)
        values["cost"] = costs[s.session] if priced[s.session] else float("nan")
        out[s.arm].append(values)
    return out


def _signed(v: float, fmt: str = "+.1f") -> str:
    return format(v, fmt).replace("-", "−")


def judge(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per signal: the arms' means, the difference and its interval; the verdict."""
    arms = per_session(rows)
    a, b = arms["rewrite"], arms["passthrough"]
    out: dict[str, Any] = {"sessions": {arm: len(v) for arm, v in arms.items()}, "signals": {}}
    for key, label in SHOWN:
        xa, xb = [s[key] for s in a], [s[key] for s in b]
        ma, mb = bootstrap.mean(xa), bootstrap.mean(xb)
        ci = bootstrap.diff_interval(xa, xb)
        out["signals"][key] = {"label": label, "rewrite": ma, "passthrough": mb,
                               "diff": None if ma is None or mb is None else ma - mb,
                               "ci": ci, "harm": ci is not None and ci[0] > 0 and key in dict(HARMS)}
    ca = [s["cost"] for s in a if s["cost"] == s["cost"]]
    cb = [s["cost"] for s in b if s["cost"] == s["cost"]]
    ma, mb = bootstrap.mean(ca), bootstrap.mean(cb)
    out["cost"] = {"rewrite": ma, "passthrough": mb, "ratio": ma / mb if ma is not None and mb else None,
                   "ci": bootstrap.ratio_interval(ca, cb), "sessions": [len(ca), len(cb)]}
    out["verdict"] = verdict(out)
    return out


def verdict(j: dict[str, Any]) -> str:
    """One sentence a user can act on."""
    if min(j["sessions"].values()) < MIN_SESSIONS:
        return (f"not enough sessions to judge ({j['sessions']['rewrite']} rewritten, "
                f"{j['sessions']['passthrough']} passthrough; at least {MIN_SESSIONS} each)")
    c = j["cost"]
    cost = "rules cost an unknown share (models without a price)"
    if c["ratio"] is not None:
        cost = f"rules cost {c['ratio']:.2f}x" + (f" [{c['ci'][0]:.2f}, {c['ci'][1]:.2f}]" if c["ci"] else "")
    parts = []
    for key, label in HARMS:
        s = j["signals"][key]
        if s["diff"] is not None and s["ci"] is not None:
            parts.append(f"{_signed(s['diff'])} {label} [{_signed(s['ci'][0])}, {_signed(s['ci'][1])}]")
    harmed = [j["signals"][k]["label"] for k, _ in HARMS if j["signals"][k]["harm"]]
    judged = f"harm ({', '.join(harmed)})" if harmed else "no detectable harm"
    return f"{cost} at {', '.join(parts)}: {judged}"
