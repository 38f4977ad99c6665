"""A fresh Messages request holding a neutral conversation (the bench writes its cases
so): the leading system messages as ``system``, tool results and the user text after
them in one user message, opaque blocks first in their turn (``opaque(n)`` makes one for
an assistant turn without). A content of parts keeps its parts, one text block each (a
tool result's too), as a client sending blocks does: joined into one string, a list the
other APIs carry as parts would reach the rules as a plain string here only."""

from __future__ import annotations

import json
from typing import Any

from context_engine.proxy.dialects.base import text_parts
from context_engine.proxy.dialects.writing import Opaque, call_arguments, text_of
from context_engine.proxy.engine.messages import system_prefix_len
from context_engine.proxy.engine.opaque import OPAQUE


def body(model: str, messages: list[Any], tools: Any, opaque: Opaque = None) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "max_tokens": 1024}
    start = system_prefix_len(messages)
    if start:
        body["system"] = "\n\n".join(text_of(m.get("content")) for m in messages[:start])
    out: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        # consecutive messages of one role stay apart (the API accepts them), but
        # tool results and the user text after them are one message, as clients send them
        if out and out[-1]["role"] == role == "user" and all(
                b["type"] == "tool_result" for b in out[-1]["content"]):
            out[-1]["content"] += blocks
        else:
            out.append({"role": role, "content": blocks})

    for n, m in enumerate(messages[start:]):
        role, text, content = m.get("role"), text_of(m.get("content")), _blocks(m.get("content"))
        if role == "tool":
            add("user", [{"type": "tool_result", "tool_use_id": m.get("tool_call_id", ""),
                          "content": content if isinstance(m.get("content"), list) else text}])
        elif role == "assistant":
            blocks = list(m.get(OPAQUE) or ([opaque(n)] if opaque else []))
            blocks += content
            for c in m.get("tool_calls") or ():
                blocks.append({"type": "tool_use", "id": c.get("id", ""), "name": c["function"]["name"],
                               "input": call_arguments(c)})
            add("assistant", blocks or [{"type": "text", "text": "(no text)"}])
        else:
            add("user", content or [{"type": "text", "text": "(empty)"}])
    body["messages"] = out
    if tools:
        body["tools"] = [{"name": t["function"]["name"], "description": t["function"].get("description", ""),
                          "input_schema": t["function"].get("parameters") or {"type": "object"}}
                         if "function" in t else t for t in tools]
    return body


def _blocks(content: Any) -> list[dict[str, Any]]:
    """A neutral content as text blocks: a string as one, each text part as its own."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return [{"type": "text", "text": t} for t in text_parts(content) if t]


def write(model: str, messages: list[Any], tools: Any, opaque: Opaque = None) -> tuple[str, bytes]:
    return "/v1/messages", json.dumps(body(model, messages, tools, opaque), ensure_ascii=False).encode()
