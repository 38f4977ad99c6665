"""The ``context_recall`` tool on the Chat Completions wire (``CHAT``, a ``dialects.recall_wire.Wire``):
its definition, whether a request may get it, adding it to the client's bytes, reading
calls to it back from a reply or a stream, and the follow-up request.

The tool goes last in ``tools``, after the client's own, every other byte as the client
sent it. It is never added to a request without tools, with a ``tool_choice`` that rules
it out (``"none"``, one named function), with ``n`` > 1, or whose client already has a
tool of that name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from context_engine.proxy.dialects.recall_wire import (
    NEUTRAL_TOOL,
    Call,
    Hold,
    Round,
    SummedUsage,
    Turn,
    WireBase,
    compact,
    finish_body,
    may_call,
)
from context_engine.proxy.engine.recall_resolve import TOOL_NAME

TOOL: dict[str, Any] = NEUTRAL_TOOL
TOOL_JSON = compact(TOOL)


def can_offer(data: dict[str, Any]) -> bool:
    """The client sent tools, lets the model call this one, and has no ``context_recall``."""
    if not may_call(data):
        return False
    return data.get("n") in (None, 1)  # several choices: no single reply to continue from


def recall_calls(message: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
    """The ``context_recall`` calls of an assistant message, and how many others it has."""
    calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    ours = [c for c in calls if isinstance(c.get("function"), dict)
            and c["function"].get("name") == TOOL_NAME]
    return ours, len(calls) - len(ours)


def _turn(message: dict[str, Any]) -> Turn:
    ours, others = recall_calls(message)
    return Turn(message, [Call(str(c.get("id") or ""), c["function"].get("arguments")) for c in ours],
                others)


@dataclass
class Reply:
    """One streamed reply: its text, its tool calls (by index) and usage. Names and
    arguments arrive in pieces; they are kept as lists and joined once, in ``turn``."""

    content: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    names: dict[int, list[str]] = field(default_factory=dict)
    arguments: dict[int, list[str]] = field(default_factory=dict)
    usage: dict[str, Any] | None = None
    hold: Hold = field(default_factory=Hold)

    def take(self, obj: dict[str, Any]) -> bool:
        """Read one chunk; whether a ``context_recall`` call begins in it."""
        if isinstance(obj.get("usage"), dict):
            self.usage = obj["usage"]
        choices = obj.get("choices")
        delta = choices[0].get("delta") if isinstance(choices, list) and choices and \
            isinstance(choices[0], dict) else None
        if not isinstance(delta, dict):
            return False
        if isinstance(delta.get("content"), str):
            self.content.append(delta["content"])
        calls, recall = delta.get("tool_calls"), False
        for c in calls if isinstance(calls, list) else []:
            if not isinstance(c, dict):
                continue
            index = _index(c)
            fn = c.get("function")
            fn = fn if isinstance(fn, dict) else {}
            if index not in self.calls:
                recall = self.hold.begins(index, str(fn.get("name") or "")) or recall
            at = self.calls.setdefault(index, {"id": "", "type": "function"})
            at["id"] = str(c.get("id") or at["id"])
            self.names.setdefault(index, []).append(str(fn.get("name") or ""))
            self.arguments.setdefault(index, []).append(str(fn.get("arguments") or ""))
        return recall

    def hide(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        choices = obj.get("choices")
        if not self.hold.recall or not isinstance(choices, list) or not choices or \
                not isinstance(choices[0], dict):
            return obj
        choice = first = choices[0]
        delta = choice.get("delta")
        if isinstance(delta, dict) and isinstance(delta.get("tool_calls"), list):
            kept = [{**c, "index": at} for c in delta["tool_calls"] if isinstance(c, dict)
                    and (at := self.hold.index(_index(c))) is not None]
            rest = {k: v for k, v in delta.items() if k != "tool_calls"}
            choice = {**choice, "delta": {**rest, "tool_calls": kept} if kept else rest}
        if choice.get("finish_reason") == "tool_calls" and not self.hold.client_calls:
            choice = {**choice, "finish_reason": "stop"}
        return obj if choice is first else {**obj, "choices": [choice, *choices[1:]]}

    def name(self, index: int) -> str:
        return "".join(self.names.get(index, ()))

    def turn(self) -> Turn:
        calls = [{**self.calls[i], "function": {"name": self.name(i),
                                                 "arguments": "".join(self.arguments.get(i, ()))}}
                 for i in sorted(self.calls)]
        return _turn({"role": "assistant", "content": "".join(self.content) or None,
                      "tool_calls": calls})


def _index(call: dict[str, Any]) -> int:
    raw = call.get("index")
    return raw if isinstance(raw, int) else 0


class ChatWire(WireBase):

    def can_offer(self, data: dict[str, Any]) -> bool:
        return can_offer(data)

    def turn(self, data: dict[str, Any]) -> Turn:
        choices = data.get("choices")
        first = choices[0] if isinstance(choices, list) and choices else None
        message = first.get("message") if isinstance(first, dict) else None
        return _turn(message if isinstance(message, dict) else {})

    def follow_up(self, sent: dict[str, Any], rounds: list[Round], last: bool) -> bytes:
        """What was sent, then per round the assistant's recall calls (only those: the
        client's own calls are asked again) and their results."""
        body = dict(sent)
        messages = list(body["messages"])
        for turn, results in rounds:
            calls, _ = recall_calls(turn.reply)
            messages.append({"role": "assistant", "content": turn.reply.get("content"),
                             "tool_calls": calls})
            messages += [{"role": "tool", "tool_call_id": c.id, "content": r}
                         for c, r in zip(turn.calls, results)]
        body["messages"] = messages
        return finish_body(body, last)


CHAT = ChatWire("chat", TOOL, Reply, SummedUsage)
