"""Runs a task set in both arms, interleaved, and collects one paired result per task.

The order is pre-registered by the seed: task ``i`` runs in both arms before task
``i + 1`` starts, and which arm goes first is drawn from ``random.Random(f"{seed}-{i}")``,
so over the set each arm goes first about half the time (a provider cache warmed by the
first arm, or a drifting model, does not favour one arm). Tasks run one at a time, so a
task's requests are the ledger rows each arm's proxy wrote while it ran.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from context_engine.bench.eval_agent_arms import ARMS, ArmProxy, usage_of

T = TypeVar("T")


@dataclass(frozen=True)
class Outcome:
    """What running one task in one arm gave, before the ledger is read."""

    solved: bool
    stop: str  # done | max_turns | max_cost | timeout | error | exit <code>
    detail: str = ""


@dataclass(frozen=True)
class ArmResult:
    solved: bool
    stop: str
    turns: int  # requests the agent sent (ledger rows)
    rereads: int  # actions repeated within a conversation (the tap)
    recall_rounds: int  # follow-up calls the proxy made to answer context_recall
    cost: float | None  # dollars, the proxy's bill of the rows (None: no list price)
    prompt_tokens: int
    rule_savings: dict[str, int] = field(default_factory=dict)
    errors: int = 0  # rows with a 4xx/5xx status
    cost_original: float | None = None  # the ledger's estimate of the client's requests sent as they were
    seconds: float = 0.0
    detail: str = ""


@dataclass(frozen=True)
class TaskResult:
    task: str
    order: tuple[str, ...]
    arms: dict[str, ArmResult]

    def as_dict(self) -> dict[str, Any]:
        return {"task": self.task, "order": list(self.order),
                "arms": {name: asdict(r) for name, r in self.arms.items()}}


def arm_order(seed: int, index: int) -> tuple[str, ...]:
    order = list(ARMS)
    random.Random(f"{seed}-{index}").shuffle(order)
    return tuple(order)


def run_tasks(tasks: Sequence[T], task_id: Callable[[T], str],
              run_one: Callable[[T, str, ArmProxy], Outcome],
              proxies: Mapping[str, ArmProxy], seed: int, quiet: bool = False) -> list[TaskResult]:
    """Each task in both arms (interleaved, see the module docstring)."""
    results = []
    for i, task in enumerate(tasks):
        order, arms = arm_order(seed, i), {}
        for arm in order:
            proxy = proxies[arm]
            proxy.rows(), proxy.tap.take()  # nothing from before this task is counted
            start = time.perf_counter()
            outcome = run_one(task, arm, proxy)
            seconds = time.perf_counter() - start
            usage = usage_of(proxy.rows())
            arms[arm] = ArmResult(
                solved=outcome.solved, stop=outcome.stop, turns=usage.turns, rereads=proxy.tap.take(),
                recall_rounds=usage.recall_rounds, cost=usage.cost, prompt_tokens=usage.prompt_tokens,
                rule_savings=usage.rule_savings, errors=usage.errors, cost_original=usage.cost_original,
                seconds=round(seconds, 2), detail=outcome.detail)
            if not quiet:
                r = arms[arm]
                print(f"eval agent: {task_id(task)} [{arm}] {'solved' if r.solved else 'FAILED'} "
                      f"({r.stop}) {r.turns} turns, {r.rereads} re-reads, {r.recall_rounds} recall "
                      f"rounds, {seconds:.1f} s", file=sys.stderr)
        results.append(TaskResult(task_id(task), order, arms))
    return results
