"""What a tool result's learned-template or stub decision may read (``tool_json``): the
assistant turns after it, up to a fixed end, so the decision never changes again."""

from __future__ import annotations

from typing import Any

from context_engine.proxy.engine.messages import calls_of, system_prefix_len, text_of, units


def lookahead_ends(messages: list[Any], block_turns: int, recent_turns: int) -> dict[int, int]:
    """For each tool message in a closed block: where the turns its decision reads end.

    A result in block ``b`` reads the messages after it up to the end of block ``b``
    plus ``recent_turns`` units: all present once ``b`` closes and fixed afterwards,
    so the decision (and the rewritten text) never changes again.
    """
    if block_turns <= 0:
        return {}
    spans = units(messages, system_prefix_len(messages))
    closed = max(0, (len(spans) - recent_turns) // block_turns) * block_turns
    ends: dict[int, int] = {}
    for u in range(closed):
        last = min(len(spans), (u // block_turns + 1) * block_turns + recent_turns)
        for i in range(*spans[u]):
            if messages[i].get("role") == "tool":
                ends[i] = spans[last - 1][1]
    return ends


def later_texts(messages: list[Any], start: int, end: int) -> list[str]:
    """Assistant text and tool-call arguments of ``messages[start + 1:end]``."""
    texts = []
    for m in messages[start + 1:end]:
        if m.get("role") != "assistant":
            continue
        texts.append(text_of(m))
        for c in m.get("tool_calls") or ():
            if isinstance(c, dict):
                texts.append(str((c.get("function") or {}).get("arguments", "")))
    return texts


def tool_names(messages: list[Any]) -> dict[int, str]:
    """Index of each tool message → name of the tool call it answers (nearest call first)."""
    names: dict[int, str] = {}
    calls: dict[str, str] = {}
    for i, m in enumerate(messages):
        if m.get("role") == "assistant" and m.get("tool_calls"):
            calls.update((cid, name) for cid, name, _ in calls_of(m))
        elif m.get("role") == "tool":
            names[i] = calls.get(str(m.get("tool_call_id", "")), "")
    return names
