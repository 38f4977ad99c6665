"""``context_recall`` on Gemini ``generateContent``: a ``dialects.recall_wire.Wire``.

- The tool is one more ``tools`` entry, ``{"functionDeclarations": [{"name":
  "context_recall", ..., "parametersJsonSchema": ...}]}``, after the client's. Not
  offered when the client declared no function, a ``functionCallingConfig`` of mode
  ``NONE`` or with ``allowedFunctionNames``, or a ``cachedContent`` (its tools are
  fixed in the cache).
- A reply's calls are the ``functionCall`` parts of its first candidate. The follow-up
  is the request as sent, then a ``model`` content with the reply's parts (thought
  signatures included; the client's own calls left out: they are asked again) and a
  ``user`` content with one ``functionResponse`` (``{"output": ...}``) per recall call.
- Stream: each event is a whole response; calls arrive whole. The stream is held from
  the first recall call; the follow-up's events go out as they come, the
  ``usageMetadata`` counts summed over rounds.
"""

from __future__ import annotations

import json
from typing import Any

from context_engine.proxy.dialects.recall_wire import (
    DESCRIPTION,
    PARAMETERS,
    Call,
    Hold,
    Round,
    SummedUsage,
    Turn,
    WireBase,
)
from context_engine.proxy.engine.recall_resolve import TOOL_NAME

TOOL: dict[str, Any] = {"functionDeclarations": [
    {"name": TOOL_NAME, "description": DESCRIPTION, "parametersJsonSchema": PARAMETERS}]}


def _parts(data: Any) -> list[Any]:
    cands = data.get("candidates") if isinstance(data, dict) else None
    first = cands[0] if isinstance(cands, list) and cands and isinstance(cands[0], dict) else {}
    content = first.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    return parts if isinstance(parts, list) else []


def _call(part: Any) -> dict[str, Any] | None:
    fc = part.get("functionCall") if isinstance(part, dict) else None
    return fc if isinstance(fc, dict) else None


def _turn(parts: list[Any]) -> Turn:
    calls, others = [], 0
    for p in parts:
        fc = _call(p)
        if fc is None:
            continue
        if fc.get("name") == TOOL_NAME:
            calls.append(Call(str(fc.get("id") or ""), fc.get("args")))
        else:
            others += 1
    return Turn(parts, calls, others)


def _declares(tools: Any) -> list[str]:
    return [str(f.get("name")) for t in tools if isinstance(t, dict)
            for f in t.get("functionDeclarations") or () if isinstance(f, dict)] \
        if isinstance(tools, list) else []


class Reader:
    """One streamed reply: its parts in order, its calls by index, its usage. A recall
    call is known by its name (calls arrive whole)."""

    def __init__(self) -> None:
        self.parts: list[Any] = []
        self.calls = 0
        self.usage: dict[str, Any] | None = None
        self.hold = Hold()

    def take(self, obj: dict[str, Any]) -> bool:
        if isinstance(obj.get("usageMetadata"), dict):
            self.usage = obj["usageMetadata"]
        recall = False
        for p in _parts(obj):
            self.parts.append(p)
            fc = _call(p)
            if fc is not None:
                recall = self.hold.begins(self.calls, str(fc.get("name") or "")) or recall
                self.calls += 1
        return recall

    def hide(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        if not self.hold.recall:
            return obj
        parts = _parts(obj)
        kept = [p for p in parts if (_call(p) or {}).get("name") != TOOL_NAME]
        if len(kept) == len(parts):
            return obj
        if not kept and "usageMetadata" not in obj:
            return None
        cands = obj["candidates"]
        first = {**cands[0], "content": {**cands[0]["content"], "parts": kept}}
        return {**obj, "candidates": [first, *cands[1:]]}

    def turn(self) -> Turn:
        return _turn(self.parts)


class GeminiWire(WireBase):

    def __init__(self) -> None:
        super().__init__("gemini", TOOL, Reader, lambda: SummedUsage("usageMetadata"))
        self.usage_key = "usageMetadata"

    def can_offer(self, data: dict[str, Any]) -> bool:
        names = _declares(data.get("tools"))
        if not names or TOOL_NAME in names or data.get("cachedContent"):
            return False
        config = data.get("toolConfig")
        calling = config.get("functionCallingConfig") if isinstance(config, dict) else None
        if isinstance(calling, dict) and (calling.get("mode") == "NONE"
                                          or calling.get("allowedFunctionNames")):
            return False
        return True

    def turn(self, data: dict[str, Any]) -> Turn:
        return _turn(_parts(data))

    def follow_up(self, sent: dict[str, Any], rounds: list[Round], last: bool) -> bytes:
        body = dict(sent)
        contents = list(body.get("contents") or [])
        for turn, results in rounds:
            contents.append({"role": "model", "parts": [
                p for p in turn.reply if (_call(p) or {}).get("name", TOOL_NAME) == TOOL_NAME]})
            contents.append({"role": "user", "parts": [
                {"functionResponse": {"name": TOOL_NAME, "response": {"output": r},
                                      **({"id": c.id} if c.id else {})}}
                for c, r in zip(turn.calls, results)]})
        body["contents"] = contents
        if last:
            body["tools"] = [t for t in body.get("tools") or () if t != TOOL]
        return json.dumps(body, ensure_ascii=False).encode("utf-8")


GEMINI = GeminiWire()
