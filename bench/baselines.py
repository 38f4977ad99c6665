"""Baselines the project is compared with: plain functions over a messages list.

- ``none``: the request as the client sent it.
- ``last_n``: the leading system prompts plus the last N messages. The window is widened
  backwards so it never starts inside a tool-call/tool-result group, and the last user
  turn is kept even when it is older than the window (the request must stay valid).
- ``mask_observations``: every tool result except the last ``keep`` is replaced by a
  one-line placeholder, as in "The Complexity Trap" (Lindenbauer et al., JetBrains, 2025).

None of them mutates its input; each returns a new list (message dicts are shared when
unchanged).
"""

from __future__ import annotations

from typing import Any

from context_engine.proxy.engine.messages import last_user_index, system_prefix_len

Messages = list[dict[str, Any]]


def none(messages: Messages) -> Messages:
    return list(messages)


def last_n(messages: Messages, n: int = 12) -> Messages:
    head = system_prefix_len(messages)
    start = max(head, len(messages) - n)
    while start > head and messages[start].get("role") == "tool":
        start -= 1
    kept = list(messages[:head])
    user = last_user_index(messages)
    if head <= user < start:
        kept.append(messages[user])
    return kept + list(messages[start:])


def placeholder(content: Any) -> str:
    """What a masked tool result says instead of its output."""
    text = content if isinstance(content, str) else str(content or "")
    lines = text.count("\n") + 1 if text else 0
    return f"[old tool output omitted: {lines} lines]"


def mask_observations(messages: Messages, keep: int = 3) -> Messages:
    tool_idx = [i for i, m in enumerate(messages) if m.get("role") == "tool"]
    masked = set(tool_idx[: max(0, len(tool_idx) - keep)])
    return [
        {**m, "content": placeholder(m.get("content"))} if i in masked else m
        for i, m in enumerate(messages)
    ]
