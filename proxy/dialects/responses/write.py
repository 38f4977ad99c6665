"""A fresh Responses request holding a neutral conversation (the bench writes its cases
so): a leading system message as ``instructions``, the rest as ``input`` items, opaque
items where they were (``opaque(n)`` makes one for an assistant turn without). A content
of parts keeps its parts (a tool output's too, as ``input_text`` parts)."""

from __future__ import annotations

import json
from typing import Any

from context_engine.proxy.dialects.writing import Opaque, text_of
from context_engine.proxy.engine.opaque import OPAQUE, PLACEHOLDER


def body(model: str, messages: list[Any], tools: Any, opaque: Opaque = None) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model}
    start = 0
    if messages and messages[0].get("role") == "system" and isinstance(messages[0].get("content"), str):
        body["instructions"], start = messages[0]["content"], 1
    items: list[dict[str, Any]] = []
    for n, m in enumerate(messages[start:]):
        role, content = m.get("role"), m.get("content")
        if isinstance(content, list):
            content = [p for p in content if p != PLACEHOLDER]
        if role == "tool":
            items.append({"type": "function_call_output", "call_id": m.get("tool_call_id", ""),
                          "output": [{"type": "input_text", "text": text_of([p])} for p in content]
                          if isinstance(content, list) else content or ""})
            continue
        if role == "assistant":
            items += m.get(OPAQUE) or ([opaque(n)] if opaque else [])
        calls = m.get("tool_calls") or [] if role == "assistant" else []
        if content or not calls:
            kind = "output_text" if role == "assistant" else "input_text"
            items.append({"type": "message", "role": role, "content": content if isinstance(content, str)
                          else [{"type": kind, "text": text_of([p])} for p in content or ()] or ""})
        items += [{"type": "function_call", "call_id": c.get("id", ""), "name": c["function"]["name"],
                   "arguments": c["function"].get("arguments", "")} for c in calls]
    body["input"] = items
    if tools:
        body["tools"] = [{"type": "function", **t["function"]} if "function" in t else t for t in tools]
    return body


def write(model: str, messages: list[Any], tools: Any, opaque: Opaque = None) -> tuple[str, bytes]:
    return "/v1/responses", json.dumps(body(model, messages, tools, opaque), ensure_ascii=False).encode()
