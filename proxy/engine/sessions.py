"""Agent sessions and chats, and the content no lossy rule may touch (``DESIGN.md``,
"Sessions: chats and agent runs").

A conversation is an **agent session** when it carries tool calls or tool results, or
when a harness sends its observations as user turns (a text-action agent: assistant
turns with a fenced command, each answered by a user turn). Everything else is a
**chat**. The kind is a function of the request alone (the client resends the whole
history, so a session keeps its kind once it has shown it), unless ``session_kind`` in
the configuration fixes it.

**Pinned** messages are never dropped, moved or rewritten by a lossy rule, on any API:
system and developer messages, the first user message (the task), and, in an agent
session, every user message that is an instruction rather than an observation.
"""

from __future__ import annotations

from typing import Any

from context_engine.proxy.engine.messages import is_injected, is_instruction, text_of

KINDS = ("auto", "chat", "agent")
AGENT, CHAT = "agent", "chat"
FENCE = "```"
TEXT_ACTIONS = 2  # fenced assistant commands answered by a user turn that make a text-action agent
ACTING_SHARE = 0.5  # ... and the share of plain assistant turns that must act: a chat's code answers don't


def _acts(m: Any) -> bool:
    """An assistant turn that issues a command as text (a fenced block)."""
    return isinstance(m, dict) and m.get("role") == "assistant" and not m.get("tool_calls") \
        and FENCE in text_of(m)


def first_user_index(messages: list[Any]) -> int:
    """Index of the first user message (the task), or -1. A message a rule injected (a
    summary, a memory zone: ``is_injected``) is no task."""
    return next((i for i, m in enumerate(messages) if isinstance(m, dict)
                 and m.get("role") == "user" and not is_injected(m)), -1)


def observations(messages: list[Any]) -> frozenset[int]:
    """User turns that answer a text-action command (a harness's observations), in a
    conversation with at least ``TEXT_ACTIONS`` of them, where at least ``ACTING_SHARE``
    of the plain assistant turns act (a harness's model acts on nearly every turn; a
    chat's assistant answers with a code block now and then), and with no tool results
    (where tools answer commands, a user turn is the harness's or the user's
    instruction); never the first user message."""
    if any(isinstance(m, dict) and m.get("role") == "tool" for m in messages):
        return frozenset()
    first = first_user_index(messages)
    found = [i for i in range(1, len(messages))
             if i != first and isinstance(messages[i], dict)
             and messages[i].get("role") == "user" and _acts(messages[i - 1])]
    replies = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant"
                  and not m.get("tool_calls"))
    if len(found) < TEXT_ACTIONS or len(found) < ACTING_SHARE * replies:
        return frozenset()
    return frozenset(found)


def session_kind(messages: list[Any], forced: str = "auto") -> str:
    """``agent`` or ``chat`` (module docstring); ``forced`` is the configured kind."""
    if forced in (AGENT, CHAT):
        return forced
    for m in messages:
        if isinstance(m, dict) and (m.get("role") == "tool" or m.get("tool_calls")):
            return AGENT
    return AGENT if observations(messages) else CHAT


def pinned(messages: list[Any], agent: bool) -> list[int]:
    """Indices of the pinned messages, in order. A user message that a rule injected (a
    summary, a memory zone: ``is_injected``) is no instruction."""
    seen = observations(messages) if agent else frozenset()
    first = first_user_index(messages)
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        if is_instruction(m) or i == first or (
                agent and role == "user" and i not in seen and not is_injected(m)):
            out.append(i)
    return out


def pinned_prefix_len(messages: list[Any]) -> int:
    """Messages up to and including the first user message: the part of a conversation
    that rules which drop or fold older turns in blocks never touch (the system prompt
    and the task). The system prefix alone when there is no user message."""
    first = first_user_index(messages)
    if first < 0:
        return next((i for i, m in enumerate(messages) if not is_instruction(m)), len(messages))
    return first + 1
