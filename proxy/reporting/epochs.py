"""Compaction epochs per session, from the ledger's ``context`` column (``compact``).

For each session with at least one epoch: how many, what they cleared, what they cost
once (the prefix re-billed uncached, in input-token equivalents) and what they have
saved since (each later request reads that many fewer cached tokens), the net of the
two, and whether the model's prices were assumed (unknown to litellm's map).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class SessionEpochs:
    session: str
    kind: str = "agent"
    requests: int = 0
    epochs: int = 0
    cleared_tokens: int = 0
    miss_tokens: float = 0.0
    saved_tokens: float = 0.0
    assumed: bool = False

    @property
    def net_tokens(self) -> float:
        return self.saved_tokens - self.miss_tokens

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "net_tokens": round(self.net_tokens, 1),
                "miss_tokens": round(self.miss_tokens, 1),
                "saved_tokens": round(self.saved_tokens, 1)}


def _context(row: dict[str, Any]) -> dict[str, Any]:
    value = row.get("context")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


def by_session(rows: list[dict[str, Any]]) -> list[SessionEpochs]:
    """Sessions that had an epoch, most saved first; ``rows`` oldest first."""
    found: dict[str, SessionEpochs] = {}
    running: dict[str, float] = {}  # per session: what its epochs before this row save
    for row in rows:
        c = _context(row).get("compaction")
        if not isinstance(c, dict):
            continue
        s = found.setdefault(str(row.get("session") or ""), SessionEpochs(str(row.get("session") or "")))
        s.kind, s.requests = str(c.get("kind") or s.kind), s.requests + 1
        s.epochs = max(s.epochs, int(c.get("epoch") or 0))
        s.assumed = s.assumed or bool(c.get("assumed"))
        # the request that fires an epoch pays its miss; the saving starts after it
        s.saved_tokens += running.get(s.session, 0.0)
        if c.get("fired"):
            s.cleared_tokens += int(c.get("cleared_tokens") or 0)
            s.miss_tokens += float(c.get("miss_tokens") or 0.0)
        running[s.session] = float(c.get("save_per_request") or 0.0)
    return sorted((s for s in found.values() if s.epochs),
                  key=lambda s: (-s.net_tokens, s.session))


def kinds(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Requests per session kind (agent, chat) as the engine decided it."""
    out: dict[str, int] = {}
    for row in rows:
        kind = _context(row).get("kind")
        if isinstance(kind, str):
            out[kind] = out.get(kind, 0) + 1
    return out
