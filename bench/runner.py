"""Runs systems over cases: one request per case, or a replay of every request point."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from context_engine.bench import billing
from context_engine.bench.cases import Case, request_points
from context_engine.bench.metrics import (
    cache_cost,
    probe_retained,
    stable_prefix_tokens,
    visible_text,
)
from context_engine.bench.reread import Rereads
from context_engine.bench.tally import Tally
from context_engine.proxy.engine.tokens import TokenCounter

Progress = Callable[[str], None]


MESSAGES = "messages"  # primary encoding, messages only (no tool schemas)
TOOL_RESULTS = "tool_results"  # primary encoding, tool-result messages only


def _counts(counters: Sequence[TokenCounter], messages: list[Any],
            tools: list[dict[str, Any]] | None) -> dict[str, int]:
    counts = {c.encoding: c.request(messages, tools) for c in counters}
    primary = counters[0]
    counts[MESSAGES] = primary.messages(messages)
    counts[TOOL_RESULTS] = sum(primary.message(m) for m in messages if m.get("role") == "tool")
    return counts


async def run_single(cases: Sequence[Case], systems: Sequence[Any],
                     counters: Sequence[TokenCounter]) -> dict[str, Tally]:
    """Each case's full request through each system (a fresh session per case, named per
    system: a ``--variant`` shares the engine's store, and under the same session id it
    would read the zones the engine committed instead of building its own)."""
    tallies = {s.name: Tally() for s in systems}
    for case in cases:
        before = _counts(counters, case.messages, case.tools)
        for system in systems:
            out = await system.open(f"{system.name}:{case.id}").rewrite(case.messages, case.tools)
            tally = tallies[system.name]
            tally.add(case.id, len(case.messages), before,
                      _counts(counters, out.messages, case.tools), out)
            text = visible_text(out.messages)
            for probe in case.probes:
                tally.add_probe(case.id, probe.evidence, probe_retained(probe.evidence, text))
            if getattr(system, "recall", False):
                tally.recall.add(case, out, counters[0])
    return tallies


async def replay_case(case: Case, system: Any, counter: TokenCounter, tally: Tally,
                      cache_ratio: float, caches: billing.Caches | None = None,
                      reread: bool = False) -> None:
    """Feed ``messages[:i + 1]`` for every request point ``i``, in order, to one session.

    Sessions are named per system: variants share the engine's store, and per-session
    state (recall's tool offer, memory indexes) must not carry from one system to another.
    Tokens and bills count the ``tools`` the proxy sends (``context_recall`` included).
    ``reread``: the bill also prices the agent's way back to next-action evidence missing
    at a cut point (``bench/reread.py``)."""
    session = system.open(f"replay:{system.name}:{case.id}", billing.MODELS["openai"])
    bill = (caches or billing.Caches()).bill("openai", system.name, case.id)
    way = Rereads(bill, counter) if reread else None
    prev: list[Any] | None = None
    prev_tools = case.tools
    cuts = dict(case.cuts)
    for turn, i in enumerate(request_points(case.messages), start=1):
        request = case.messages[: i + 1]
        out = await session.rewrite(request, case.tools)
        if i + 1 in cuts:  # a cut point's probes, on what this request sends
            text = visible_text(out.messages)
            for probe in cuts[i + 1]:
                tally.add_probe(f"{case.id}@{i + 1}", probe.evidence,
                                probe_retained(probe.evidence, text), probe.kind)
            if getattr(system, "recall", False):  # --recall: reachable by a marker's id
                tally.recall.add(replace(case, messages=request, probes=cuts[i + 1]), out, counter)
        tools = out.tools_sent(case.tools)
        total = counter.request(out.messages, tools)
        tally.add(case.id, len(request), {counter.encoding: counter.request(request, case.tools)},
                  {counter.encoding: total}, out)
        stable, full = stable_prefix_tokens(counter, prev, out.messages, prev_tools, tools)
        tally.add_replay(turn, out.ms, stable, total, None if prev is None else full,
                         cache_cost(stable, total, cache_ratio), out.epoch)
        bill.add(request, case.tools, out, counter.request(request, case.tools), total, tools)
        if way is not None:
            way.after(request, out, tools, cuts.get(i + 1, ()))
        prev, prev_tools = out.messages, tools
    tally.add_bill(bill)


async def run_replay(cases: Sequence[Case], systems: Sequence[Any], counter: TokenCounter,
                     cache_ratio: float, anthropic: bool = False,
                     cache_scope: str = "session", reread: bool = False) -> dict[str, Tally]:
    tallies = {s.name: Tally() for s in systems}
    caches = billing.Caches(cache_scope)
    for case in cases:
        for system in systems:
            await replay_case(case, system, counter, tallies[system.name], cache_ratio, caches,
                              reread)
            if anthropic:  # a second replay by a client that sets Anthropic breakpoints
                await billing.replay_anthropic(case, system, counter, tallies[system.name], caches,
                                               reread)
    return tallies


def summarize(tallies: dict[str, Tally]) -> dict[str, Any]:
    none = tallies.get("none")
    return {name: t.summary(none) for name, t in tallies.items()}
