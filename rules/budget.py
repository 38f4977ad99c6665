"""budget: the last line of defence; drops by priority until the request fits the input budget.

What it does
    Counts the rewritten request (messages and tool schemas). If it exceeds the input
    budget (``max_input_tokens``, or the model's ``max_input_tokens`` in litellm's
    bundled model map minus the request's ``max_tokens``), it drops, oldest first within
    each step, until the request fits:

    1. old tool outputs: a unit whose results are all stored-original stubs is dropped
       whole; raw outputs become a one-line stub naming the id the original is stored
       under (the last ``keep_recent`` units are spared in this step);
    2. retrieved snippets (messages starting with ``[context-engine:memory]``);
    3. summary detail: summaries keep only their header, pending_tasks and revocations;
       then whole summaries go;
    4. the oldest turns (whole units).

    System and developer messages (anywhere), tool definitions, the task and (in an
    agent session) every instruction (pinned), the last user turn, the final unit and
    turns holding images, audio or files are never dropped, nor is half of a
    tool-call/tool-result pair, nor a unit whose removal would put two user messages side
    by side. If the request still cannot fit (a task larger than the budget, say), it
    goes out as the client sent it: a cut that fails anyway would only lose facts, and
    the upstream's own error reaches the client.

    An agent that compacts its own history when the provider rejects a request as too
    long (Claude Code: ``as_sent_agents``, matched on the request's agent tag) gets its
    messages as it sent them once the original is over the window (``max_input_tokens``,
    else the model's, ``max_tokens`` aside), every rule's rewrite undone: the provider's
    error reaches it at the request where it would direct, and it compacts there. Cut to
    fit instead, the error never comes, the agent never compacts, and the history it
    holds and sends grows without bound (docs/agents.md).

Why
    A request over the context window fails outright. Dropping what matters least, by a
    fixed priority list, beats truncating history from the front.

Example
    budget 2,000, request 9,500 tokens with three old 3,000-token tool outputs
    → the outputs become ``[context-engine:dropped] tool output (3,012 tokens) stored as
    orig:1a2b3c4d5e6f``; nothing else changes.

Options
    max_input_tokens, keep_recent, as_sent_agents (see ``BudgetConfig``).

Risks
    Lossy by design, and only when the request would otherwise fail. Everything dropped
    is listed in the journal note; dropped tool outputs are kept in the store. A request
    sent as is for ``as_sent_agents`` fails as it would direct (not billed; the agent
    compacts and goes on).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from context_engine.proxy.billing.pricing import context_window
from context_engine.proxy.engine.context import RequestContext
from context_engine.proxy.engine.contract import RuleDeps, option
from context_engine.proxy.engine.messages import (
    MEMORY_HEADER,
    SUMMARY_HEADER,
    ClientText,
    is_injected,
    is_injected_ack,
    is_instruction,
    last_user_index,
    media_refs,
    system_prefix_len,
    text_of,
    units,
)
from context_engine.proxy.engine.originals import cited_id, cites_original, keep_original
from context_engine.proxy.engine.sessions import AGENT, pinned
from context_engine.proxy.engine.tokens import TokenCounter

DROPPED = "[context-engine:dropped]"
_STUB_CHARS = 300


def _marked(header: str) -> Callable[[Any], bool]:
    """Whether a message is one a rule injected under ``header`` (in its first lines: zones
    may have wrapped it); a client's own text that reads the same is the client's."""
    return lambda m: not isinstance(m, ClientText) and header in text_of(m)[:_STUB_CHARS]
_DETAIL = re.compile(r"^(confirmed_facts|preferences|decisions|tool_results):$")
_KEPT = re.compile(r"^(pending_tasks|revocations):$")


@dataclass(frozen=True)
class BudgetConfig:
    max_input_tokens: int = option(0, "input budget in tokens; 0 = the model's max_input_tokens "
                                      "from litellm's bundled model map minus the request's "
                                      "max_tokens (no budget for unknown models)")
    keep_recent: int = option(2, "last units whose tool outputs are not stubbed in the first "
                                 "step (they can still go in the last step)")
    as_sent_agents: str = option("claude", "agents (their tag: context-engine run's, or the "
                                           "X-Context-Engine-Agent header; comma separated) that "
                                           "compact their history when the provider rejects a "
                                           "request as too long: a request of theirs whose original "
                                           "is over the window (max_input_tokens, else the model's, "
                                           "max_tokens aside) goes out as sent, every rule's "
                                           "rewrite undone, so that error reaches them where it "
                                           "would direct (empty: trim theirs too)")


class _Plan:
    """The messages being cut down, with a running token total and a drop log."""

    def __init__(self, messages: list[Any], counter: TokenCounter, total: int,
                 caller: str = "", agent: bool = False) -> None:
        self.caller = caller  # whose store scope keeps the stubbed originals
        self.slots: list[Any] = list(messages)  # None = dropped
        self.counter = counter
        self.total = total
        self.dropped: list[dict[str, Any]] = []
        n = len(messages)
        self.prev = list(range(-1, n - 1))  # index of the kept message before each one
        self.next = list(range(1, n + 1))  # …and after it (n = none)
        # Units that may go: not system, not the last user turn, not the final unit. Units
        # keep their spans: a step drops whole units or replaces contents in place.
        last_user = last_user_index(messages)
        head = system_prefix_len(messages)
        self.first = head  # the first message kept after the system prompt
        self.all_units = units(messages, head)
        # Never system/developer messages, the task or an agent's instructions (pinned), nor
        # images, audio or files (the turn is kept).
        pins = set(pinned(messages, agent))
        self.units = [(s, e) for s, e in self.all_units[:-1] if not (s <= last_user < e)
                      and not is_instruction(messages[s])
                      and not any(i in pins or media_refs(messages[i]) for i in range(s, e))]

    def drop_unit(self, s: int, e: int, kind: str) -> None:
        """Drop messages ``s:e`` unless a later system message would join the system prompt
        or two user messages would meet. An injected message goes with the line after it."""
        if e < len(self.slots) and is_injected(self.slots[s]) and is_injected_ack(self.slots, e):
            e += 1
        before, after = self.prev[s], self.next[e - 1]  # kept neighbours
        n = len(self.slots)
        if before >= 0 and after < n and \
                self.slots[before].get("role") == self.slots[after].get("role") == "user":
            return
        if s == self.first:  # the first message after the system prompt: check what follows
            if after < n and is_instruction(self.slots[after]):
                return
            self.first = after
        for i in range(s, e):
            self.put(i, None, kind)

    def alive(self) -> Iterator[tuple[int, int]]:
        """Units not dropped yet, checked as the caller goes (a drop may take the next one)."""
        return ((s, e) for s, e in self.units if self.slots[s] is not None)

    def put(self, i: int, new: Any, kind: str) -> None:
        old = self.slots[i]
        saved = self.counter.message(old) - (self.counter.message(new) if new is not None else 0)
        if saved <= 0:
            return
        self.slots[i] = new
        self.total -= saved
        if new is None:  # unlink: neighbours skip dropped messages in O(1)
            before, after = self.prev[i], self.next[i]
            if before >= 0:
                self.next[before] = after
            if after < len(self.slots):
                self.prev[after] = before
        self.dropped.append({"kind": kind, "index": i, "tokens": saved})


class Budget:
    name = "budget"
    Config = BudgetConfig

    def __init__(self, config: BudgetConfig, deps: RuleDeps) -> None:
        self.config = config
        self.store = deps.store
        self.as_sent = {a.strip() for a in config.as_sent_agents.split(",") if a.strip()}

    def budget_for(self, ctx: RequestContext) -> int:
        if self.config.max_input_tokens > 0:
            return self.config.max_input_tokens
        window = context_window(ctx.model)
        return max(0, window - (ctx.max_tokens or 0)) if window else 0

    async def apply(self, ctx: RequestContext) -> RequestContext:
        budget = self.budget_for(ctx)
        if budget <= 0:
            return ctx.with_note(self.name, {"budget": 0, "fits": True})
        counter = TokenCounter(ctx.encoding)
        before = counter.request(ctx.messages, ctx.tools)
        if ctx.agent in self.as_sent and ctx.original is not None:
            # the provider's "prompt is too long" (input over the window, max_tokens aside:
            # Claude Code lowers max_tokens on that error) is the agent's signal to compact
            window = self.config.max_input_tokens or context_window(ctx.model)
            original = before if ctx.messages is ctx.original else counter.request(ctx.original, ctx.tools)
            if original > window:
                return ctx.replace(messages=ctx.original).with_note(
                    self.name, {"budget": budget, "tokens": original, "fits": False, "as_sent": ctx.agent})
        if before <= budget:
            return ctx.with_note(self.name, {"budget": budget, "tokens": before, "fits": True})
        plan = _Plan(ctx.messages, counter, before, ctx.caller, ctx.kind == AGENT)
        for step in self._steps():
            if plan.total <= budget:
                break
            step(plan, budget)
        out = [m for m in plan.slots if m is not None]
        fits = plan.total <= budget
        note = {"budget": budget, "tokens": before, "after": plan.total if fits else before,
                "fits": fits, "dropped_count": len(plan.dropped) if fits else 0,
                "dropped": plan.dropped if fits else [],
                **({} if fits else {"could_reach": plan.total})}
        if not plan.dropped or not fits:
            return ctx.with_note(self.name, note)
        return ctx.replace(messages=out).with_note(self.name, note)

    def _steps(self) -> list[Callable[[_Plan, int], None]]:
        return [self._tool_outputs, self._snippets, self._summary_detail, self._summaries,
                self._turns]

    def _tool_outputs(self, plan: _Plan, budget: int) -> None:
        keep = self.config.keep_recent
        spare = set(plan.all_units[-keep:]) if keep > 0 else set()
        for s, e in plan.alive():
            if plan.total <= budget:
                return
            if (s, e) in spare or plan.slots[s].get("role") != "assistant" or e - s < 2:
                continue
            results = [plan.slots[i] for i in range(s + 1, e)]
            if all(_is_stub(text_of(m)) for m in results):
                plan.drop_unit(s, e, "stub_unit")
                continue
            for i in range(s + 1, e):
                self._stub(plan, i)

    def _stub(self, plan: _Plan, i: int) -> None:
        m = plan.slots[i]
        content = m.get("content")
        if not isinstance(content, str) or _is_stub(content):
            return
        ref = keep_original(self.store, content, cited_id(content), scope=plan.caller)
        tokens = plan.counter.text(content)
        stub = f"{DROPPED} tool output ({tokens:,} tokens) stored as {ref}"
        plan.put(i, {**m, "content": stub}, "tool_output")

    def _snippets(self, plan: _Plan, budget: int) -> None:
        self._drop_marked(plan, budget, _marked(MEMORY_HEADER), "snippet")

    def _summaries(self, plan: _Plan, budget: int) -> None:
        self._drop_marked(plan, budget, _marked(SUMMARY_HEADER), "summary")

    def _drop_marked(self, plan: _Plan, budget: int, marked: Callable[[Any], bool], kind: str) -> None:
        for s, e in plan.alive():
            if plan.total <= budget:
                return
            if e - s == 1 and marked(plan.slots[s]):
                plan.drop_unit(s, e, kind)

    def _summary_detail(self, plan: _Plan, budget: int) -> None:
        for s, e in plan.alive():
            if plan.total <= budget:
                return
            m = plan.slots[s]
            content = m.get("content")
            if e - s == 1 and isinstance(content, str) and _marked(SUMMARY_HEADER)(m):
                plan.put(s, {**m, "content": _without_detail(content)}, "summary_detail")

    def _turns(self, plan: _Plan, budget: int) -> None:
        for s, e in plan.alive():
            if plan.total <= budget:
                return
            plan.drop_unit(s, e, "turn")


def _is_stub(text: str) -> bool:
    return len(text) <= _STUB_CHARS and cites_original(text)


def _without_detail(content: str) -> str:
    """A summary with only its header lines, pending_tasks and revocations."""
    kept: list[str] = []
    keep = True
    for line in content.split("\n"):
        if _DETAIL.match(line):
            keep = False
        elif _KEPT.match(line) or not line.startswith("- "):
            keep = True
        if keep:
            kept.append(line)
    return "\n".join(kept)
