"""A fresh ``generateContent`` request holding a neutral conversation (the bench writes
its cases so): the model in the path, the leading system messages as
``systemInstruction``, calls and responses with the chat ids (as Gemini CLI sends them),
opaque parts first in their turn (``opaque(n)`` makes one for a model turn without)."""

from __future__ import annotations

import json
from typing import Any

from context_engine.proxy.dialects.writing import Opaque, call_arguments, text_of
from context_engine.proxy.engine.messages import system_prefix_len
from context_engine.proxy.engine.opaque import OPAQUE


def body(model: str, messages: list[Any], tools: Any, opaque: Opaque = None) -> dict[str, Any]:
    """A ``generateContent`` body (the model goes in the path). Calls and responses
    carry the chat ids, as Gemini CLI's do."""
    body: dict[str, Any] = {}
    start = system_prefix_len(messages)
    if start:
        body["systemInstruction"] = {"parts": [
            {"text": "\n\n".join(text_of(m.get("content")) for m in messages[:start])}]}
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for n, m in enumerate(messages[start:]):
        role, text = m.get("role"), text_of(m.get("content"))
        if role == "tool":
            cid = m.get("tool_call_id", "")
            part = {"functionResponse": {"id": cid, "name": names.get(cid, ""), "response": {"output": text}}}
            if out and out[-1]["role"] == "user" and all("functionResponse" in p for p in out[-1]["parts"]):
                out[-1]["parts"].append(part)
            else:
                out.append({"role": "user", "parts": [part]})
        elif role == "assistant":
            parts = list(m.get(OPAQUE) or ([opaque(n)] if opaque else []))
            parts += [{"text": text}] if text else []
            for c in m.get("tool_calls") or ():
                names[c.get("id", "")] = c["function"]["name"]
                parts.append({"functionCall": {"id": c.get("id", ""), "name": c["function"]["name"],
                                               "args": call_arguments(c)}})
            out.append({"role": "model", "parts": parts or [{"text": "(no text)"}]})
        else:
            out.append({"role": "user", "parts": [{"text": text or "(empty)"}]})
    body["contents"] = out
    if tools:
        body["tools"] = [{"functionDeclarations": [
            {"name": t["function"]["name"], "description": t["function"].get("description", ""),
             "parameters": t["function"].get("parameters") or {"type": "object"}}
            for t in tools if "function" in t]}]
    return body


def write(model: str, messages: list[Any], tools: Any, opaque: Opaque = None) -> tuple[str, bytes]:
    return (f"/v1beta/models/{model}:generateContent",
            json.dumps(body(model, messages, tools, opaque), ensure_ascii=False).encode())
