"""The invariant that keeps opaque items (reasoning, thinking, compaction, unknown types)
intact through the rules. Called from ``context_engine.proxy.engine.invariants.rewrite_problems``.

- every opaque item reaches the rewrite, the same and in the same order;
- the message that holds one is never dropped;
- nothing after the last message holding one is dropped (rules cut only before it).
"""

from __future__ import annotations

from typing import Any

# Keys an adapter adds to a neutral message: the wire container it came from, and the
# items in it the rules must not touch (``proxy/dialects/base.py`` explains both).
SRC = "_ce_src"
OPAQUE = "_ce_opaque"
PLACEHOLDER = {"type": "opaque", "text": ""}  # content of a message holding only opaque units


def _key(m: Any) -> tuple[Any, Any, Any]:
    return (m.get(SRC), m.get("role"), m.get("tool_call_id")) if isinstance(m, dict) else (None,) * 3


def opaque_problems(original: list[Any], rewritten: list[Any]) -> list[str]:
    holders = [i for i, m in enumerate(original) if isinstance(m, dict) and m.get(OPAQUE)]
    if not holders:
        return []
    found: list[str] = []
    before = [o for i in holders for o in original[i][OPAQUE]]
    after = [o for m in rewritten if isinstance(m, dict) for o in m.get(OPAQUE) or ()]
    if before != after:
        found.append("opaque items were changed, dropped, duplicated or reordered")
    kept = {_key(m): m.get(OPAQUE) for m in rewritten if isinstance(m, dict)}
    for i in holders:
        if kept.get(_key(original[i])) != original[i][OPAQUE]:
            found.append(f"message {i}, which holds opaque items, was dropped or lost them")
    for i in range(holders[-1] + 1, len(original)):
        if _key(original[i]) not in kept:
            found.append(f"message {i} after the last opaque item was dropped")
    return found
