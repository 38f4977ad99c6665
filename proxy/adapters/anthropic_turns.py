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

from collections.abc import Callable
from dataclasses import dataclass

from context_engine.proxy.adapters.base import dumps

LEFT_OUT = dumps({"type": "text", "text": "(earlier turns left out)"})
KindOf = Callable[[str], tuple[str, str]]  # a block's text -> (its type, its tool id)


@dataclass
class Out:
    """One message on its way back: role, block texts, and ``src`` when it is unchanged."""

    role: str
    blocks: list[str]
    src: int | None = None
    raw: str = ""
    orig: int | None = None  # the client's message it comes from, changed or not


def valid_turns(outs: list[Out], sent: list[Out], kind_of: KindOf) -> list[Out]:
    """``outs`` made valid for Anthropic, or ``ValueError``; ``sent`` is the client's own."""
    outs = merge(outs, kind_of)
    if outs and outs[0].role != "user" and sent and sent[0].role == "user":
        outs.insert(0, Out("user", [LEFT_OUT]))  # a cut that starts on an assistant turn
    new = problems(outs, kind_of) - problems(sent, kind_of)
    if new:
        raise ValueError(f"the rewrite would be invalid for Anthropic: {sorted(new)[:3]}")
    return outs


def merge(outs: list[Out], kind_of: KindOf) -> list[Out]:
    """Same-role neighbours the rewrite made neighbours as one message, tool results
    first; one pass, each block's kind read once."""
    merged: list[Out] = []
    run: list[Out] = []  # the outs merged[-1] stands for

    def close() -> None:
        if len(run) > 1:
            blocks = [b for r in run for b in r.blocks]
            result = [kind_of(b)[0] == "tool_result" for b in blocks]
            merged[-1] = Out(run[-1].role, [b for b, r in zip(blocks, result) if r]
                             + [b for b, r in zip(blocks, result) if not r])

    for o in outs:
        if not o.blocks and not o.raw:  # emptied by the rewrite (one sent empty stays)
            continue
        prev = merged[-1] if merged else None
        sent_so = prev is not None and len(run) == 1 and prev.orig is not None \
            and o.orig == prev.orig + 1
        if prev is not None and prev.role == o.role and not sent_so:
            run.append(o)
        else:
            close()
            merged.append(o)
            run = [o]
    close()
    return merged


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
