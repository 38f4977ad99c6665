"""Runs the configured rules over a request, guarding each one.

- Each rule's tokens before/after, time and note go into the journal.
- A rule that raises is skipped, logged with its name and counted; the request goes on
  with the messages from before that rule (rules never mutate their input).
- Past ``deadline`` (``time.monotonic()``; the client already got the original), the
  next rule does not start: the rewrite ends there, failed open.
- After the last rule the invariants run; if the rewrite broke one, the original
  messages are sent and the failure is counted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from context_engine.proxy.engine.context import JournalEntry, RequestContext
from context_engine.proxy.engine.contract import ClosedBlocks, Fencing, Rule
from context_engine.proxy.engine.invariants import rewrite_problems

log = logging.getLogger("context_engine.pipeline")


@dataclass
class PipelineResult:
    ctx: RequestContext
    journal: list[JournalEntry]
    tokens_before: int
    tokens_after: int
    failed_open: bool = False
    problems: list[str] = field(default_factory=list)
    original_messages: Any = None

    @property
    def changed(self) -> bool:
        return self.ctx.messages is not self.original_messages


@dataclass
class PipelineStats:
    """Process-wide counters (exposed by /healthz and the ledger); rewrites of several
    sessions update them from several threads, so updates take a lock."""

    rule_failures: Counter[str] = field(default_factory=Counter)
    invariant_failures: int = 0
    failed_open_by: Counter[str] = field(default_factory=Counter)  # deadline, shed
    # (rule, exception type) whose traceback was logged: an outage fails every request the
    # same way, and one traceback says all of it (later failures: one line each)
    traced: set[tuple[str, str]] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def first_failure(self, rule: str, exc: BaseException) -> bool:
        with self.lock:
            key = (rule, type(exc).__name__)
            first = key not in self.traced
            self.traced.add(key)
            return first

    def add(self, kind: str, rule: str = "") -> None:
        with self.lock:
            if kind == "rule":
                self.rule_failures[rule] += 1
            elif kind == "invariant":
                self.invariant_failures += 1
            else:
                self.failed_open_by[kind] += 1


class Pipeline:
    def __init__(self, rules: list[Rule], stats: PipelineStats | None = None) -> None:
        self.rules = rules
        self.stats = stats or PipelineStats()

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.rules]

    def fencing(self, notes: dict[str, Any]) -> Fencing | None:
        """The first rule offering ``Fencing`` that ran on a request with these ``notes``."""
        return next((r for r in self.rules if isinstance(r, Fencing) and r.name in notes), None)

    def blocks(self) -> tuple[int, int] | None:
        """``(window, block)`` of the last rule offering ``ClosedBlocks`` (None: no rule does)."""
        offered = [r.blocks() for r in self.rules if isinstance(r, ClosedBlocks)]
        return offered[-1] if offered else None

    async def run(self, ctx: RequestContext, counter: Any,
                  deadline: float | None = None) -> PipelineResult:
        original = ctx.messages
        tokens_before = counter.request(original, ctx.tools)
        journal: list[JournalEntry] = []
        current = ctx
        tokens = tokens_before
        for rule in self.rules:
            if deadline is not None and time.monotonic() > deadline:
                return PipelineResult(ctx, journal, tokens_before, tokens_before, failed_open=True,
                                      problems=["rules_deadline_ms passed"],
                                      original_messages=original)
            start = time.perf_counter()
            try:
                nxt = await rule.apply(current)
            except Exception as exc:  # the rule guard: one failing rule never breaks a request
                ms = (time.perf_counter() - start) * 1000
                self.stats.add("rule", rule.name)
                if self.stats.first_failure(rule.name, exc):
                    log.exception("rule %s failed; skipped", rule.name)
                else:
                    log.warning("rule %s failed; skipped: %r", rule.name, exc)
                journal.append(JournalEntry(rule.name, tokens, tokens, ms, error=repr(exc)[:300]))
                continue
            ms = (time.perf_counter() - start) * 1000
            after = tokens if nxt.messages is current.messages else counter.request(nxt.messages, nxt.tools)
            note = nxt.notes.get(rule.name, "")
            journal.append(JournalEntry(rule.name, tokens, after, ms, note=_short(note),
                                        output=nxt.messages))
            current, tokens = nxt, after
        result = PipelineResult(current, journal, tokens_before, tokens, original_messages=original)
        if current.messages is not original:
            found = rewrite_problems(original, current.messages, current.system_line, ctx.kind)
            if found:
                self.stats.add("invariant")
                log.warning("rewrite broke invariants, sending the original: %s", found[:3])
                result.ctx = ctx
                result.tokens_after = tokens_before
                result.failed_open = True
                result.problems = found
        return result


def _short(note: Any) -> str:
    if isinstance(note, str):
        return note[:200]
    if isinstance(note, dict):
        return ", ".join(f"{k}={v}" for k, v in note.items() if isinstance(v, (int, float, str)))[:200]
    return str(note)[:200]
