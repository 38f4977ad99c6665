"""Running totals of one system on one data file, and their summary."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from context_engine.bench.billing import BillTotals, CaseBill
from context_engine.bench.metrics import length_bucket, median, percentile, ratio
from context_engine.bench.recall_model import RecallTally
from context_engine.bench.systems import Outcome

TURNS = (20, 100, 200)  # replay request points whose latency is reported


@dataclass
class Tally:
    requests: int = 0
    tokens_before: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    tokens_after: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    probes: int = 0
    retained: int = 0
    probes_without_evidence: int = 0
    lost: list[str] = field(default_factory=list)
    invalid: int = 0
    problems: list[str] = field(default_factory=list)
    failed_open: int = 0
    reverted: list[str] = field(default_factory=list)
    rule_errors: int = 0
    rule_saved: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    rule_ms: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    ms: list[float] = field(default_factory=list)
    background_ms: list[float] = field(default_factory=list)
    client_ms: list[float] = field(default_factory=list)  # rewrite + the background work it queued
    over_deadline: int = 0
    ms_by_length: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    # replay only
    stable_shares: list[float] = field(default_factory=list)
    full_prefix: int = 0
    prefix_points: int = 0
    epochs: int = 0  # requests on which compact fired an epoch
    other_breaks: int = 0  # requests that do not extend the one before, outside an epoch
    cost: float = 0.0
    ms_by_turn: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))
    bills: dict[str, BillTotals] = field(default_factory=dict)  # per billing model
    recall: RecallTally = field(default_factory=RecallTally)  # bench --recall (careful model)
    by_kind: dict[str, list[int]] = field(default_factory=dict)  # probe kind: [retained, probes]

    def add(self, case_id: str, n_messages: int, before: dict[str, int], after: dict[str, int],
            out: Outcome) -> None:
        self.requests += 1
        for enc, n in before.items():
            self.tokens_before[enc] += n
        for enc, n in after.items():
            self.tokens_after[enc] += n
        if out.problems:
            self.invalid += 1
            if len(self.problems) < 5:
                self.problems.append(f"{case_id}: {out.problems[0]}")
        self.failed_open += int(out.failed_open)
        if out.failed_open and len(self.reverted) < 5:
            self.reverted.append(f"{case_id}: {'; '.join(out.reverted_because[:2])}")
        for entry in out.journal:
            self.rule_errors += int(bool(entry.error))
            self.rule_ms[entry.rule].append(entry.ms)
            if not out.failed_open:  # a reverted rewrite saved nothing
                self.rule_saved[entry.rule] += entry.saved
        self.ms.append(out.ms)
        self.background_ms.append(out.background_ms)
        # what a client can wait: the background work a request queues shares the cores
        # with the next requests (all of it, when the upstream answers faster)
        self.client_ms.append(out.ms + out.background_ms)
        self.over_deadline += int(getattr(out, "over_deadline", False))
        self.ms_by_length[length_bucket(n_messages)].append(out.ms)

    def add_probe(self, case_id: str, evidence: tuple[str, ...], retained: bool,
                  kind: str = "") -> None:
        if not evidence:
            self.probes_without_evidence += 1
            return
        self.probes += 1
        self.retained += int(retained)
        if kind:
            seen = self.by_kind.setdefault(kind, [0, 0])
            seen[0] += int(retained)
            seen[1] += 1
        if not retained and len(self.lost) < 5:
            self.lost.append(case_id)

    def add_replay(self, turn: int, ms: float, stable: int, total: int, full: bool | None,
                   cost: float, epoch: bool = False) -> None:
        self.stable_shares.append(stable / total if total else 0.0)
        self.epochs += int(epoch)
        if full is not None:
            self.prefix_points += 1
            self.full_prefix += int(full)
            self.other_breaks += int(not full and not epoch)
        self.cost += cost
        if turn in TURNS:
            self.ms_by_turn[turn].append(ms)

    def add_bill(self, bill: CaseBill) -> None:
        self.bills.setdefault(bill.kind, BillTotals()).add(bill)

    def summary(self, none: Tally | None = None) -> dict[str, Any]:
        enc = list(self.tokens_before)
        out: dict[str, Any] = {
            "requests": self.requests,
            "tokens_before": {e: self.tokens_before[e] for e in enc},
            "tokens_after": {e: self.tokens_after[e] for e in enc},
            "reduction": {e: _round(1 - (ratio(self.tokens_after[e], self.tokens_before[e]) or 1))
                          for e in enc},
            "probes": self.probes,
            "retained": self.retained,
            "retention": _round(ratio(self.retained, self.probes)),
            "probes_without_evidence": self.probes_without_evidence,
            "retained_by_kind": {k: list(v) for k, v in sorted(self.by_kind.items())},
            "lost_examples": self.lost,
            "invalid": self.invalid,
            "problem_examples": self.problems,
            "failed_open": self.failed_open,
            "failed_open_examples": self.reverted,
            "rule_errors": self.rule_errors,
            "rule_saved": dict(sorted(self.rule_saved.items())),
            "rule_latency_ms": {r: _latency(v) for r, v in sorted(self.rule_ms.items())},
            "latency_ms": _latency(self.ms),
            "prefetch_latency_ms": _latency(self.background_ms),
            "client_latency_ms": _latency(self.client_ms),
            "latency_over_deadline": self.over_deadline,
            "latency_ms_by_length": {k: _latency(v) for k, v in sorted(self.ms_by_length.items(),
                                                                      key=_bucket_key)},
        }
        if self.recall.probes:
            out["recall"] = self.recall.summary(none.tokens_before[enc[0]] if none and enc else 0)
        if self.stable_shares:
            out["replay"] = {
                "prefix_stability_mean": _round(sum(self.stable_shares) / len(self.stable_shares)),
                "full_prefix_share": _round(ratio(self.full_prefix, self.prefix_points)),
                "epochs": self.epochs,
                "breaks_outside_epochs": self.other_breaks,
                "cost": round(self.cost, 1),
                "cost_vs_none": _round(ratio(self.cost, none.cost)) if none else None,
                "latency_ms_at_turn": {str(t): _latency(self.ms_by_turn.get(t, [])) for t in TURNS},
                "billing": {k: b.summary() for k, b in sorted(self.bills.items())},
            }
        return out


def _bucket_key(item: tuple[str, Any]) -> int:
    label = item[0]
    return int(label[1:]) + 1 if label.startswith(">") else int(label.split("-")[0])


def _round(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits)


def _latency(values: list[float]) -> dict[str, Any]:
    med, p95 = median(values), percentile(values, 95)
    return {"n": len(values), "median": None if med is None else round(med, 3),
            "p95": None if p95 is None else round(p95, 3)}
