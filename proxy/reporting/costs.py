"""What a rule's re-reads cost on a session against what it saved there, priced like the bill.

A re-read result enters the conversation once (billed as a cache write: the input price,
Anthropic's write premium where the model has one) and is read again on each later
request of the session (the cached-input price). What a rule saved is the tokens it
removed from each request it rewrote; those would have been prefix reads, so they are
priced at the cached-input price too (the cautious side: a saving is never overstated).
Models litellm's price map does not know are priced in input-token equivalents with
the ratios ``compact`` assumes (cached read 0.1, write 1.0), marked ``assumed``.

``rule_flags`` lists each (session, rule) whose re-read cost exceeds its saving, with
the numbers.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from context_engine.proxy.billing.pricing import price_for

ASSUMED_CACHED, ASSUMED_WRITE = 0.1, 1.0  # per input token, where the model has no price


def _prices(model: str) -> tuple[float, float, bool]:
    """(cached read, cache write) per token, and whether they are assumed."""
    price = price_for(model)
    if price is None or not price.input:
        return ASSUMED_CACHED, ASSUMED_WRITE, True
    return price.cached_input, max(price.input, price.cache_write), False


def json_column(value: Any) -> dict[str, Any]:
    """A ledger JSON column (``rule_savings``, ``reread_rules``) as a dict; {} if it is not one."""
    if isinstance(value, dict):
        return value
    try:
        out = json.loads(value or "{}")
    except (TypeError, ValueError):
        return {}
    return out if isinstance(out, dict) else {}


def session_costs(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per rule on one session (its rows, in order): ``saving`` and ``reread_cost``."""
    cached, write, _ = _prices(str(rows[0].get("model") or "")) if rows else (0.0, 0.0, True)
    out: dict[str, dict[str, float]] = defaultdict(lambda: {"saving": 0.0, "reread_cost": 0.0,
                                                            "reread_tokens": 0.0})
    for k, r in enumerate(rows):
        later = len(rows) - k - 1
        if r.get("arm") != "shadow" and not r.get("failed_open"):
            for rule, n in json_column(r.get("rule_savings")).items():
                if n:
                    out[rule]["saving"] += float(n) * cached
        for rule, (_, tokens) in json_column(r.get("reread_rules")).items():
            out[rule]["reread_cost"] += float(tokens) * (write + later * cached)
            out[rule]["reread_tokens"] += float(tokens)
    return dict(out)


def rule_flags(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each (session, rule) whose re-reads cost more than the rule saved on the session."""
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        grouped[str(r.get("session") or "")].append(r)
    flags = []
    for session, rs in grouped.items():
        _, _, assumed = _prices(str(rs[0].get("model") or ""))
        for rule, c in session_costs(rs).items():
            if c["reread_cost"] > c["saving"]:
                flags.append({"session": session, "rule": rule, "model": rs[0].get("model") or "",
                              "reread_tokens": int(c["reread_tokens"]),
                              "reread_cost": c["reread_cost"], "saving": c["saving"],
                              "unit": "input-token equivalents" if assumed else "USD"})
    return sorted(flags, key=lambda f: f["saving"] - f["reread_cost"])
