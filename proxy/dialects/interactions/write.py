"""A fresh Interactions request holding a neutral conversation (the bench writes its
cases so): the leading system messages as ``system_instruction``, the rest as steps
(``user_input``, ``model_output``, ``function_call``, ``function_result``), opaque steps
first in the model's turn (``opaque(n)`` makes one for a model turn without)."""

from __future__ import annotations

import json
from typing import Any

from context_engine.proxy.dialects.writing import Opaque, call_arguments, text_of
from context_engine.proxy.engine.messages import system_prefix_len
from context_engine.proxy.engine.opaque import OPAQUE


def body(model: str, messages: list[Any], tools: Any, opaque: Opaque = None) -> dict[str, Any]:
    out: dict[str, Any] = {"model": model}
    start = system_prefix_len(messages)
    if start:
        out["system_instruction"] = "\n\n".join(text_of(m.get("content")) for m in messages[:start])
    steps: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for n, m in enumerate(messages[start:]):
        role, text = m.get("role"), text_of(m.get("content"))
        if role == "tool":
            cid = m.get("tool_call_id", "")
            steps.append({"type": "function_result", "call_id": cid, "name": names.get(cid, ""),
                          "result": text})
        elif role == "assistant":
            steps += list(m.get(OPAQUE) or ([opaque(n)] if opaque else []))
            if text:
                steps.append({"type": "model_output", "content": [{"type": "text", "text": text}]})
            for c in m.get("tool_calls") or ():
                names[c.get("id", "")] = c["function"]["name"]
                steps.append({"type": "function_call", "id": c.get("id", ""),
                              "name": c["function"]["name"], "arguments": call_arguments(c)})
        else:
            steps.append({"type": "user_input", "content": [{"type": "text", "text": text or "(empty)"}]})
    out["input"] = steps
    if tools:
        out["tools"] = [{"type": "function", "name": t["function"]["name"],
                         "description": t["function"].get("description", ""),
                         "parameters": t["function"].get("parameters") or {"type": "object"}}
                        for t in tools if "function" in t]
    return out


def write(model: str, messages: list[Any], tools: Any, opaque: Opaque = None) -> tuple[str, bytes]:
    return "/v1beta/interactions", json.dumps(body(model, messages, tools, opaque), ensure_ascii=False).encode()
