"""A scripted careful model for ``context-engine bench --recall``.

For each probe, it reads the request the engine would send. Evidence visible there is
*reachable directly*. For evidence that is missing, it looks for a marker that names the
client message holding it (a ``[context-engine:recall] turns from #a on`` line covering it, or
the ``orig:<id>`` of that tool output) and calls ``context_recall`` with that id, all
missing pieces in one round: evidence in the answers is *reachable after recall*. A second
figure asks by query instead (the probe's question, one call), as a model that does not
know where its evidence lies would. Calls are answered by ``context_engine.proxy.engine.recall_resolve``, the
code the server runs.

Tokens: each request counts with the tool's definition when the engine offered it; a
recall round adds one follow-up request (the request again, the assistant's calls and
their results) to the total.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from context_engine.bench.cases import Case
from context_engine.bench.metrics import decoded_arguments, visible_text
from context_engine.proxy.dialects.chat.recall import TOOL
from context_engine.proxy.engine.messages import text_of
from context_engine.proxy.engine.originals import original_id
from context_engine.proxy.engine.recall_resolve import resolve
from context_engine.proxy.engine.tokens import TokenCounter

_TURNS = re.compile(r"\[context-engine:recall\] turns from #(\d+) on")


@dataclass
class RecallTally:
    probes: int = 0
    direct: int = 0
    by_id: int = 0  # reachable directly or after recall by the id a marker names
    by_query: int = 0  # reachable directly or after one recall by the probe's question
    rounds_id: int = 0
    rounds_query: int = 0
    request_tokens: int = 0  # requests as sent, with the tool's definition when offered
    recall_tokens_id: int = 0  # input tokens of the follow-up requests (id rounds)
    recall_tokens_query: int = 0
    offered: int = 0

    def add(self, case: Case, out: Any, counter: TokenCounter) -> None:
        state = out.recall
        tools = list(case.tools or []) + ([TOOL] if state is not None and state.offer else [])
        self.offered += int(state is not None and state.offer)
        request = counter.request(out.messages, tools or None)
        self.request_tokens += request
        text = visible_text(out.messages)
        for probe in case.probes:
            if not probe.evidence:
                continue
            self.probes += 1
            missing = [e for e in probe.evidence if e not in text]
            if not missing:
                self.direct += 1
                self.by_id += 1
                self.by_query += 1
                continue
            if state is None or not state.offer:
                continue
            ids = list(dict.fromkeys(i for e in missing if (i := named_id(case.messages, out.messages, e))))
            if ids:
                answers = [resolve(state.scope, {"id": i}) for i in ids]
                self.rounds_id += 1
                self.recall_tokens_id += _round_tokens(counter, out.messages, tools, ids, answers, "id")
                self.by_id += all(any(e in a for a in answers) for e in missing)
            answer = resolve(state.scope, {"query": probe.question})
            self.rounds_query += 1
            self.recall_tokens_query += _round_tokens(counter, out.messages, tools,
                                                      [probe.question], [answer], "query")
            self.by_query += all(e in answer for e in missing)

    def summary(self, tokens_none: int) -> dict[str, Any]:
        def share(n: int, d: int) -> float | None:
            return round(n / d, 4) if d else None

        total_id = self.request_tokens + self.recall_tokens_id
        total_query = self.request_tokens + self.recall_tokens_query
        return {
            "probes": self.probes, "direct": share(self.direct, self.probes),
            "reachable_by_id": share(self.by_id, self.probes),
            "reachable_by_query": share(self.by_query, self.probes),
            "rounds_id": self.rounds_id, "rounds_query": self.rounds_query,
            "requests_offered": self.offered, "request_tokens": self.request_tokens,
            "total_tokens_id": total_id, "total_tokens_query": total_query,
            "reduction_id": share(tokens_none - total_id, tokens_none),
            "reduction_query": share(tokens_none - total_query, tokens_none),
        }


def named_id(original: list[Any], sent: list[Any], evidence: str) -> str | None:
    """The id a marker in ``sent`` gives a client message holding ``evidence``: its
    text's ``orig:`` id (a cleared result or turn), a shortened tool input's, or a
    ``[context-engine:recall]`` line's turn range."""
    holding = [k for k, m in enumerate(original) if evidence in visible_text([m])]
    if not holding:
        return None
    shown = visible_text(sent)
    for k in holding:
        m = original[k]
        texts = [text_of(m)] + [v for v in decoded_arguments(m) if evidence in v]
        for oid in (original_id(t) for t in texts if t):
            if oid in shown:
                return oid
    for found in _TURNS.finditer(shown):
        if int(found.group(1)) <= holding[0]:
            return f"#{holding[0]}"
    return None


def recall_turn(args: list[str], answers: list[str], key: str) -> list[dict[str, Any]]:
    """What a recall round appends to the request: the assistant's ``context_recall`` calls
    (one per argument, by ``key``: ``id`` or ``query``) and their results."""
    calls = [{"id": f"call_{n}", "type": "function", "function": {
        "name": "context_recall", "arguments": json.dumps({key: a})}} for n, a in enumerate(args)]
    return [{"role": "assistant", "content": None, "tool_calls": calls}] + [
        {"role": "tool", "tool_call_id": c["id"], "content": r} for c, r in zip(calls, answers)]


def _round_tokens(counter: TokenCounter, sent: list[Any], tools: list[Any], args: list[str],
                  answers: list[str], key: str) -> int:
    return counter.request(list(sent) + recall_turn(args, answers, key), tools or None)
