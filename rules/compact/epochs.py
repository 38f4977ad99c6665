"""A session's compaction line, committed to the store (``compact:<session>``).

The line is what every epoch so far cleared: client message indices, each with a short
hash of the message it cleared, so the rewrite of a request is a function of the request
and this state only (replicas sharing the store, and a restarted proxy, send the same
bytes). A request that no longer holds a cleared message as it was (the client edited or
compacted its own history) does not continue the line: it starts a new one.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from typing import Any

from context_engine.proxy.engine.context import Compaction
from context_engine.proxy.engine.messages import fingerprint
from context_engine.proxy.engine.sessions import AGENT
from context_engine.proxy.store.stores import Store, StoreUnavailable

log = logging.getLogger("context_engine.compact")
PREFIX = "compact:"
LOG_EPOCHS = 32  # epochs whose figures the state keeps (the ledger keeps them all)


@dataclass(frozen=True)
class Epoch:
    """What one epoch did: at which request (client messages), what it cleared, what it
    was expected to cost (the prefix re-billed uncached, in input-token equivalents) and
    to save per later request (cleared tokens at the cached price), and why it fired."""

    epoch: int
    at: int
    cleared: int
    cleared_tokens: int
    miss_tokens: float
    save_per_request: float
    reason: str


@dataclass
class Line:
    cleared: dict[int, str] = field(default_factory=dict)  # client index -> message hash
    epochs: list[Epoch] = field(default_factory=list)
    seen: float = 0.0  # time of the session's last request (cache lifetime)
    at: int = 0  # client messages of the request that fired the last epoch

    @property
    def epoch(self) -> int:
        return self.epochs[-1].epoch if self.epochs else 0

    def holds(self, messages: list[Any]) -> bool:
        """Whether ``messages`` continue this line: every cleared message is still there,
        unchanged."""
        return len(messages) >= self.at and all(
            i < len(messages) and message_hash(messages[i]) == h for i, h in self.cleared.items())

    def figures(self, fired: bool, agent: bool, assumed: bool) -> Compaction:
        """The request's compaction figures (the ledger's): the last epoch's when it fired."""
        last = self.epochs[-1] if self.epochs else None
        return Compaction(
            kind=AGENT if agent else "chat", epoch=self.epoch, fired=fired,
            cleared=len(self.cleared),
            cleared_tokens=last.cleared_tokens if fired and last else 0,
            miss_tokens=last.miss_tokens if fired and last else 0.0,
            save_per_request=sum(e.save_per_request for e in self.epochs),
            reason=last.reason if fired and last else "", assumed=assumed)

    def to_bytes(self) -> bytes:
        return json.dumps({"cleared": {str(k): v for k, v in sorted(self.cleared.items())},
                           "epochs": [asdict(e) for e in self.epochs[-LOG_EPOCHS:]],
                           "seen": self.seen, "at": self.at}, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> Line:
        data = json.loads(raw)
        return cls({int(k): str(v) for k, v in data.get("cleared", {}).items()},
                   [Epoch(**e) for e in data.get("epochs", [])],
                   float(data.get("seen", 0.0)), int(data.get("at", 0)))


def message_hash(m: Any) -> str:
    return fingerprint(m)


def load(store: Store, session: str) -> Line | None:
    """The committed line, or None (none yet, unreadable, or the store is down)."""
    try:
        raw = store.get(PREFIX + session)
        return Line.from_bytes(raw) if raw is not None else None
    except StoreUnavailable:
        log.warning("compact: store unavailable; this request continues no epoch line")
        return None
    except (ValueError, TypeError, KeyError):
        log.warning("compact: unreadable state of session %s; a new line starts", session)
        return None


def commit(store: Store, session: str, line: Line) -> bool:
    """Write ``line``; False when the store is down (the caller then sends no new epoch)."""
    try:
        store.set(PREFIX + session, line.to_bytes())
        return True
    except StoreUnavailable:
        return False
