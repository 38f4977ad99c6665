"""``ab.guard``: turn a rule off for new sessions when it makes agents re-read.

In ``mode: ab`` the rewrite arm's ledger rows carry the re-reads each rule caused
(``proxy/engine/rereads.py``). The guard keeps, per rule, the re-reads it caused in the
rewrite arm's sessions that ran with it, and how many such sessions there were. Once
``ab_guard_min_sessions`` sessions ran it and its re-reads per session exceed
``ab_guard_rereads_per_session`` (0 = no guard), the rule is off for every session the
engine has not seen yet. A session keeps the rules it started with: its requests never
switch (the set of rules off is fixed at its first rewrite; up to ``MAX_SESSIONS``
sessions are remembered, the least recently seen forgotten first).

The decision and its evidence (the rule, its re-reads and sessions, the threshold) are
logged and recorded in the ledger as a note row (``arm = 'guard'``,
``read_rows(notes=True)``). The state lives in the process: a restart, or another
replica, starts the guard afresh from live traffic.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any

from context_engine.proxy.engine.pipeline import Pipeline

MAX_SESSIONS = 100_000  # sessions whose rules are remembered


class AbGuard:
    def __init__(self, threshold: float = 0.0, min_sessions: int = 10) -> None:
        self.threshold, self.min_sessions = threshold, min_sessions
        self.off: frozenset[str] = frozenset()
        self.decisions: list[dict[str, Any]] = []
        self._started: OrderedDict[str, frozenset[str]] = OrderedDict()  # session -> rules off
        self._rereads: dict[str, int] = {}  # rule -> re-reads in sessions that ran it
        self._ran: dict[str, set[str]] = {}  # rule -> rewrite-arm sessions that ran it
        self._pipelines: dict[tuple[int, frozenset[str]], Pipeline] = {}
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.threshold > 0

    def rules_off(self, session: str) -> frozenset[str]:
        """The rules off for ``session``: those off when it was first seen."""
        with self._lock:
            off = self._started.get(session)
            if off is None:
                off = self._started[session] = self.off
                if len(self._started) > MAX_SESSIONS:
                    self._started.popitem(last=False)
            else:
                self._started.move_to_end(session)
            return off

    def pipeline(self, session: str, pipeline: Pipeline) -> Pipeline:
        """``pipeline`` without the rules off for ``session``."""
        if not self.enabled:
            return pipeline
        off = self.rules_off(session) & set(pipeline.names)
        if not off:
            return pipeline
        key = (id(pipeline), off)
        with self._lock:
            if key not in self._pipelines:
                self._pipelines[key] = Pipeline([r for r in pipeline.rules if r.name not in off],
                                                pipeline.stats)
            return self._pipelines[key]

    def observe(self, row: Any) -> dict[str, Any] | None:
        """Count an ``ab`` rewrite-arm row; the decision when a rule trips, else None."""
        if not self.enabled or row.mode != "ab" or row.arm != "rewrite":
            return None
        with self._lock:
            off = self._started.get(row.session, frozenset())
            ran = [r for r in row.rule_savings if r not in off]
            for rule in ran:
                self._ran.setdefault(rule, set()).add(row.session)
            for rule, (n, _) in row.reread_rules.items():
                if rule in ran:
                    self._rereads[rule] = self._rereads.get(rule, 0) + int(n)
            return self._trip()

    def _trip(self) -> dict[str, Any] | None:
        for rule, sessions in self._ran.items():
            n, rereads = len(sessions), self._rereads.get(rule, 0)
            if rule in self.off or n < self.min_sessions or rereads / n <= self.threshold:
                continue
            self.off = self.off | {rule}
            decision = {"rule": rule, "action": "off for new sessions", "rereads": rereads,
                        "sessions": n, "rereads_per_session": rereads / n,
                        "threshold": self.threshold, "min_sessions": self.min_sessions,
                        "ts": time.time()}
            self.decisions.append(decision)
            return decision
        return None
