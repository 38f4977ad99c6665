"""Anthropic's rules for the turns of a request, applied to a rewrite on its way back.

- Neighbours of the same role that the rewrite made neighbours become one message
  (tool results first); messages the rewrite emptied go. Neighbours the client sent
  stay as they are.
- The first message is a user message: a cut that leaves an assistant message first
  gets ``LEFT_OUT`` (one short text block) in front.
- Every ``tool_result`` answers a ``tool_use`` of the message before it, and every
  ``tool_use`` is answered by the next message. A rewrite that would break this where
  the client's request did not is refused (``ValueError``: the original goes out).
"""

from __future__ import annotations

from context_engine.proxy.dialects.base import dumps
from context_engine.proxy.dialects.turns import KindOf, Out, merge

LEFT_OUT = dumps({"type": "text", "text": "(earlier turns left out)"})
__all__ = ["LEFT_OUT", "KindOf", "Out", "merge", "problems", "valid_turns"]


def valid_turns(outs: list[Out], sent: list[Out], kind_of: KindOf) -> list[Out]:
    """``outs`` made valid for Anthropic, or ``ValueError``; ``sent`` is the client's own."""
    outs = merge(outs, kind_of)
    if outs and outs[0].role != "user" and sent and sent[0].role == "user":
        outs.insert(0, Out("user", [LEFT_OUT]))  # a cut that starts on an assistant turn
    new = problems(outs, kind_of) - problems(sent, kind_of)
    if new:
        raise ValueError(f"the rewrite would be invalid for Anthropic: {sorted(new)[:3]}")
    return outs


def problems(outs: list[Out], kind_of: KindOf) -> set[str]:
    """What Anthropic would refuse: unanswered or stray tool ids, a leading assistant."""
    found: set[str] = set()
    prev: set[str] = set()
    for o in outs:
        kinds = [kind_of(b) for b in o.blocks]
        calls = {k for t, k in kinds if t == "tool_use"}
        results = {k for t, k in kinds if t == "tool_result"}
        found |= {f"tool_result {r} without its tool_use" for r in results - prev}
        if o.role == "user":
            found |= {f"tool_use {c} without its result" for c in prev - results}
        prev = calls
    if outs and outs[0].role != "user":
        found.add("the first message is not a user message")
    return found
