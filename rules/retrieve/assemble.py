"""The request ``retrieve`` sends: the system prefix, the turns that stay (the pinned task,
summaries, instructions, media and tool-call units), each memory zone just before the
user turn it was retrieved for (or after the task: ``position: after_system``), then the
raw tail; and whether that is any cheaper than what the client sent."""

from __future__ import annotations

from typing import Any

from context_engine.proxy.engine.messages import separate_users
from context_engine.proxy.engine.sessions import first_user_index
from context_engine.proxy.engine.tokens import TokenCounter
from context_engine.rules.retrieve.committed import Zone


def assemble(msgs: list[Any], head: int, cut: int, zones: dict[int, Zone],
             keep: frozenset[int], position: str) -> list[Any]:
    """``msgs[:head]``, the kept messages of ``head:cut``, then ``msgs[cut:]`` with each
    zone placed; never two user messages in a row."""
    order = sorted(keep)
    kept = [msgs[i] for i in order]
    if position == "after_system":  # after the task, which is pinned
        zone = [{"role": "user", "content": z.text} for z in zones.values()]
        pinned = 1 if order and order[0] == first_user_index(msgs) else 0
        return separate_users(list(msgs[:head]) + kept[:pinned] + zone + kept[pinned:]
                              + list(msgs[cut:]), msgs)
    out = list(msgs[:head]) + kept
    for i in range(cut, len(msgs)):
        if i in zones:
            out.append({"role": "user", "content": zones[i].text})
        out.append(msgs[i])
    return separate_users(out, msgs)


def saves(before: list[Any], after: list[Any], counter: TokenCounter) -> bool:
    """Whether ``after`` costs fewer tokens than ``before``: what left against what came in
    (zones, acks keeping two user turns apart); by identity: kept ones are the client's."""
    kept = {id(m) for m in after}
    came = {id(m) for m in before}
    left = [m for m in before if id(m) not in kept]
    added = [m for m in after if id(m) not in came]
    return counter.messages(added) < counter.messages(left)
