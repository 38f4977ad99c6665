"""The replay bench's re-read model: what the agent pays to get back evidence a rewrite hid.

The replay treats the agent's next request as fixed. At a cut point where a piece of
evidence the agent's next command uses (a ``next_action`` probe) is not visible in what
the engine sends, the agent cannot act before it has it again. This module prices the
cheapest way back, through the provider's cache exactly as the replay bill prices its
requests (``bench/billing.py``'s simulators, on a fork of the session's cache: the way
back never changes what the replayed requests read from the cache, so the bill without
it stays the replay's bill):

(a) a **recall round**, when the engine offered ``context_recall`` and a marker names the
    missing piece (``recall_model.named_id``, answered by the server's ``recall_resolve``):
    one follow-up request = this request (its prefix cached as the simulator says) + the
    assistant's recall calls + what they return, plus the calls' output tokens. The proxy
    answers the calls itself and the client never sees them: nothing stays in the history.
(b) **re-running the command** whose result held the piece (the smallest such result):
    one more agent turn per command = this request again with the turn that ran it (as
    the agent wrote it the first time, priced as output) and its result as it came the
    first time (a command re-run after edits could print something else; it is assumed
    not to). Assumption: the re-run turn stays in the client's history, so every later
    request reads it again at the cached price, until the next compaction epoch clears it
    (as it clears the result it repeats) or the session ends.

Where both reach every missing piece, the cheaper is taken (a tie: recall); a piece only
one way reaches goes that way (a recall round first, then the re-runs); a piece neither
reaches (no marker names it and no command produced it) is counted as lost, at no cost.
The model reads the neutral (Chat Completions) form the bench replays by default.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from context_engine.bench.billing import MODELS, CaseBill, render
from context_engine.bench.cases import Probe
from context_engine.bench.metrics import visible_text
from context_engine.bench.recall_model import named_id, recall_turn
from context_engine.bench.way_back import WayBack
from context_engine.proxy.billing.row_bill import row_bill
from context_engine.proxy.engine.prefix import MARK
from context_engine.proxy.engine.recall_resolve import resolve
from context_engine.proxy.engine.tokens import TokenCounter
from context_engine.proxy.recording.ledger import LedgerRow

NEXT_ACTION = "next_action"
Messages = list[dict[str, Any]]


@dataclass
class Plan:
    """One way back at one cut point: the pieces it brings back and what it costs."""

    recalled: dict[str, str]  # piece → the id a marker names for it
    rerun: dict[str, int]  # piece → the client message (a command's result) holding it
    usd: float = 0.0
    rounds: int = 0
    commands: int = 0
    carried: int = 0  # tokens the re-run turns leave in the client's history
    answers: dict[str, str] = field(default_factory=dict)


class Rereads:
    """The way back of one replayed session under one billing model (``bill.kind``); its
    figures go to ``bill.way_back``. Call ``after`` once per request, after the bill's."""

    def __init__(self, bill: CaseBill, counter: TokenCounter) -> None:
        self.bill, self.counter = bill, counter
        self.way = bill.way_back = WayBack()

    def after(self, request: Messages, out: Any, tools: list[Any] | None,
              probes: tuple[Probe, ...]) -> None:
        """``request`` went out as ``out`` (with ``tools``): later requests carry the re-run
        turns until an epoch; then the way back to what ``probes`` (a cut point's) need."""
        way = self.way
        if out.epoch:
            way.carried = 0
        elif way.carried:
            way.carry_usd += self._cost(way.carried, way.carried, 0, 0)
        if not probes:
            return
        way.checked += sum(p.kind == NEXT_ACTION and bool(p.evidence) for p in probes)
        missing = missing_pieces(probes, visible_text(out.messages))
        if missing:
            self._settle(request, out, tools, missing)

    def _settle(self, request: Messages, out: Any, tools: list[Any] | None,
                missing: list[tuple[str, ...]]) -> None:
        pieces = list(dict.fromkeys(e for lost in missing for e in lost))
        plans = self.plans(request, out, tools, pieces)
        plan = min(plans, key=lambda p: p.usd)
        back = set(plan.recalled) | set(plan.rerun)
        way = self.way
        if plans[0].recalled != plans[1].recalled:  # a piece both ways reach: a choice
            way.both += 1
            way.both_recall += int(plan is plans[0])
        way.cuts += 1
        way.probes += len(missing)
        way.probes_back += sum(all(e in back for e in lost) for lost in missing)
        way.pieces += len(pieces)
        way.recalled += len(plan.recalled)
        way.rerun += len(plan.rerun)
        way.unreachable += len(pieces) - len(back)
        way.recall_rounds += plan.rounds
        way.rereads += plan.commands
        way.recall_chosen += int(bool(plan.recalled))
        way.rerun_chosen += int(bool(plan.rerun))
        way.usd += plan.usd
        way.carried += plan.carried

    def plans(self, request: Messages, out: Any, tools: list[Any] | None,
              pieces: list[str]) -> list[Plan]:
        """The two ways back to ``pieces``, priced: recall first (what a marker names and
        recall answers; re-runs for the rest), then re-runs first (recall only for what no
        command produced). They are the same plan when only one way applies."""
        ids, answers = recallable(request, out, pieces)
        sources = {e: k for e in pieces if (k := source_of(request, e, self.counter)) is not None}
        plans = [Plan(ids, {e: k for e, k in sources.items() if e not in ids}, answers=answers),
                 Plan({e: i for e, i in ids.items() if e not in sources}, sources, answers=answers)]
        return [self._price(p, request, out, tools) for p in plans]

    def _price(self, plan: Plan, request: Messages, out: Any, tools: list[Any] | None) -> Plan:
        """``plan``'s requests, each billed on one fork of the session's simulated cache."""
        sim = self.bill.proxy_sim.fork()
        if plan.recalled:
            asked = list(dict.fromkeys(plan.recalled.values()))
            turn = recall_turn(asked, [plan.answers[i] for i in asked], "id")
            plan.usd += self._request(sim, [*out.messages, *turn], tools, turn[0])
            plan.rounds = 1
        history = newest_unmarked(out.messages)
        for n, k in enumerate(sorted(set(plan.rerun.values()))):
            reply, result = rerun_turn(request, k, n)
            history = [*newest_unmarked(history), reply, result]
            sent = history if self.bill.kind != "anthropic" else \
                [*history[:-1], {**result, MARK: {"type": "ephemeral"}}]  # the client's breakpoint
            plan.usd += self._request(sim, sent, tools, reply)
            plan.carried += self.counter.message(reply) + self.counter.message(result)
            plan.commands += 1
        return plan

    def _request(self, sim: Any, messages: Messages, tools: list[Any] | None,
                 reply: dict[str, Any]) -> float:
        prompt, read, write = sim.bill(render(messages, tools))
        return self._cost(prompt, read, write, self.counter.message(reply))

    def _cost(self, prompt: int, read: int, write: int, completion: int) -> float:
        row = LedgerRow(model=MODELS[self.bill.kind], prompt_tokens=prompt, cached_tokens=read,
                        cache_write_tokens=write, completion_tokens=completion, arm="passthrough",
                        tokens_original=prompt, tokens_sent=prompt)
        priced = row_bill(vars(row))
        return priced.actual if priced is not None else 0.0


def missing_pieces(probes: tuple[Probe, ...], text: str) -> list[tuple[str, ...]]:
    """The evidence of each ``next_action`` probe that ``text`` does not show (probes fully
    visible, or of another kind, left out)."""
    out = []
    for probe in probes:
        lost = tuple(e for e in probe.evidence if e not in text) if probe.kind == NEXT_ACTION else ()
        if lost:
            out.append(lost)
    return out


def recallable(request: Messages, out: Any,
               pieces: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """The pieces a recall round brings back (piece → the id a marker names) and each id's
    answer, as the server answers one round's calls (one budget for the round)."""
    state = out.recall
    if state is None or not state.offer:
        return {}, {}
    scope = replace(state.scope, spent=0)  # the bench's other recall figures spent this one's
    named = {e: i for e in pieces if (i := named_id(request, out.messages, e))}
    answers = {i: resolve(scope, {"id": i}) for i in dict.fromkeys(named.values())}
    return {e: i for e, i in named.items() if e in answers[i]}, answers


def source_of(messages: Messages, evidence: str, counter: TokenCounter) -> int | None:
    """The smallest client message holding ``evidence`` that a command produced: a tool
    result whose call is in the history, or (text actions) a user turn right after an
    assistant turn, other than the task."""
    first_user = next((k for k, m in enumerate(messages) if m.get("role") == "user"), -1)
    found = [k for k, m in enumerate(messages)
             if evidence in visible_text([m]) and _produced(messages, k, first_user)]
    return min(found, key=lambda k: (counter.message(messages[k]), k), default=None)


def _produced(messages: Messages, k: int, first_user: int) -> bool:
    role = messages[k].get("role")
    if role == "tool":
        return _asking(messages, k) is not None
    return role == "user" and k > first_user and k > 0 and messages[k - 1].get("role") == "assistant"


def _asking(messages: Messages, k: int) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The assistant turn and the call that ``messages[k]`` (a tool result) answers."""
    ref = messages[k].get("tool_call_id")
    for m in reversed(messages[:k]):
        calls = m.get("tool_calls") if m.get("role") == "assistant" else None
        for call in calls or ():
            if isinstance(call, dict) and call.get("id") == ref:
                return m, call
    return None


def rerun_turn(messages: Messages, k: int, n: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The agent's turn that runs the command of ``messages[k]`` again (as it wrote it the
    first time, under a new call id) and its result (as it came the first time)."""
    content = messages[k].get("content")
    asking = _asking(messages, k)
    if asking is None:  # a text action: the command is the reply's fenced block
        return {"role": "assistant", "content": messages[k - 1].get("content")}, \
            {"role": "user", "content": content}
    turn, call = asking
    again = {**call, "id": f"reread_{n}"}
    return {"role": "assistant", "content": turn.get("content"), "tool_calls": [again]}, \
        {"role": "tool", "tool_call_id": again["id"], "content": content}


def newest_unmarked(messages: Messages) -> Messages:
    """``messages`` without a breakpoint on the newest one (the client moves it on)."""
    if not messages or MARK not in messages[-1]:
        return list(messages)
    return [*messages[:-1], {k: v for k, v in messages[-1].items() if k != MARK}]
