"""The ``context_recall`` tool on the wire (Chat Completions): its definition, whether a
request may get it, adding it to the client's bytes, and reading calls to it back.

The tool goes last in ``tools``, after the client's own, every other byte as the client
sent it. It is never added to a request without tools, with ``tool_choice: "none"``, or
whose client already has a tool of that name.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from context_engine.proxy.edge.jsonspan import object_spans
from context_engine.proxy.engine.tokens import TokenCounter
from context_engine.proxy.recall.resolve import TOOL_NAME

TOOL: dict[str, Any] = {"type": "function", "function": {
    "name": TOOL_NAME,
    "description": "Return text the context proxy shortened or left out of this conversation: "
                   "pass the id a marker names (orig:<id>, or #n for turn n), or a query to "
                   "search the earlier turns.",
    "parameters": {"type": "object", "properties": {
        "id": {"type": "string", "description": "an id from a marker: orig:<id> or #n"},
        "query": {"type": "string", "description": "words to search the earlier turns for"}}}}}
TOOL_JSON = json.dumps(TOOL, separators=(",", ":"))


@functools.lru_cache(maxsize=8)
def tool_tokens(encoding: str) -> int:
    """What the definition adds to a request's input tokens."""
    counter = TokenCounter(encoding)
    probe = [{"role": "user", "content": "x"}]
    other = [{"type": "function", "function": {"name": "x", "parameters": {"type": "object"}}}]
    return counter.request(probe, other + [TOOL]) - counter.request(probe, other)


def can_offer(data: dict[str, Any]) -> bool:
    """The client sent tools, lets the model call them, and has no ``context_recall``."""
    tools = data.get("tools")
    if not isinstance(tools, list) or not tools or data.get("tool_choice") == "none":
        return False
    if data.get("n") not in (None, 1):
        return False  # several choices: no single reply to continue from
    return not any(isinstance(t, dict) and tool_name(t) == TOOL_NAME for t in tools)


def tool_name(tool: dict[str, Any]) -> str:
    fn = tool.get("function")
    return str(fn.get("name") if isinstance(fn, dict) else tool.get("name") or "")


def add_tool(raw: bytes) -> bytes:
    """The body with the tool appended to its ``tools`` array (the rest byte for byte);
    ``raw`` itself when it has no such array."""
    try:
        text = raw.decode("utf-8")
        data, spans = object_spans(text)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return raw
    if not isinstance(data.get("tools"), list) or not data["tools"]:
        return raw
    _, end = spans["tools"]
    close = text.rindex("]", 0, end)
    return (text[:close] + "," + TOOL_JSON + text[close:]).encode("utf-8")


def recall_calls(message: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
    """The ``context_recall`` calls of an assistant message, and how many others it has."""
    calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    ours = [c for c in calls if isinstance(c.get("function"), dict)
            and c["function"].get("name") == TOOL_NAME]
    return ours, len(calls) - len(ours)


def follow_up(sent: dict[str, Any], rounds: list[tuple[dict[str, Any], list[str]]],
              last: bool) -> bytes:
    """The next request: what was sent, then per round the assistant's recall calls (only
    those: the client's own calls are asked again) and their results. The last allowed
    round goes without the tool, so its reply cannot call it again."""
    body = dict(sent)
    messages = list(body["messages"])
    for message, results in rounds:
        calls, _ = recall_calls(message)
        assistant: dict[str, Any] = {"role": "assistant", "content": message.get("content"),
                                     "tool_calls": calls}
        messages.append(assistant)
        messages += [{"role": "tool", "tool_call_id": c.get("id"), "content": r}
                     for c, r in zip(calls, results)]
    body["messages"] = messages
    if last:
        body["tools"] = [t for t in body.get("tools") or []
                         if not (isinstance(t, dict) and tool_name(t) == TOOL_NAME)]
    return json.dumps(body, ensure_ascii=False).encode("utf-8")
