"""``context_recall`` on Anthropic Messages (``POST /v1/messages``): a ``dialects.recall_wire.Wire``.

- The tool is ``{"name": "context_recall", "description": ..., "input_schema": ...}``
  after the client's tools, without ``cache_control``: the client's breakpoints stay
  where they were and no new one is added (never more than the client's, so never more
  than 4). Not offered when the client sent no tools, a ``tool_choice`` of ``none`` or
  one named tool, or a last message of the assistant (a prefill to continue).
- A reply's calls are its ``tool_use`` blocks. The follow-up is the request as sent,
  then an assistant message with the reply's content (thinking blocks and their
  signatures included; the client's own ``tool_use`` blocks left out: they are asked
  again) and a user message with one ``tool_result`` per recall call. The messages the
  client sent come first, unchanged, so its cached prefix still reads from the cache.
- Stream: held from the first ``tool_use`` block named ``context_recall``. The client sees one message: the
  follow-up's ``message_start`` is left out, its blocks' ``index`` comes after the
  blocks the client already has, and its ``message_delta`` carries the usage summed
  over rounds (input, cache read and write, output).
"""

from __future__ import annotations

import json
from typing import Any

from context_engine.proxy.dialects.recall_wire import (
    DESCRIPTION,
    PARAMETERS,
    Hold,
    Round,
    Turn,
    WireBase,
    finish_body,
    may_call,
    repeated,
    split_calls,
    sum_counts,
)
from context_engine.proxy.engine.recall_resolve import TOOL_NAME

TOOL: dict[str, Any] = {"name": TOOL_NAME, "description": DESCRIPTION, "input_schema": PARAMETERS}


def _turn(content: Any) -> Turn:
    blocks = content if isinstance(content, list) else []
    calls, others = split_calls(blocks, ("tool_use",), "input", "id")
    return Turn(blocks, calls, others)


class Reader:
    """One streamed reply: its content blocks, rebuilt from the deltas, and its usage."""

    def __init__(self) -> None:
        self.blocks: dict[int, dict[str, Any]] = {}
        # deltas by block and field ("input" JSON, "text", "thinking", "citations"),
        # joined once in ``turn``
        self.parts: dict[tuple[int, str], list[Any]] = {}
        self.usage: dict[str, Any] | None = None
        self.hold = Hold()

    def take(self, obj: dict[str, Any]) -> bool:
        kind, index = obj.get("type"), obj.get("index")
        if kind == "message_start" and isinstance(obj.get("message"), dict):
            usage = obj["message"].get("usage")
            self.usage = dict(usage) if isinstance(usage, dict) else None
        elif kind == "message_delta" and isinstance(obj.get("usage"), dict):
            self.usage = {**(self.usage or {}), **obj["usage"]}
        elif kind == "content_block_start" and isinstance(index, int) and \
                isinstance(obj.get("content_block"), dict):
            block = self.blocks[index] = dict(obj["content_block"])
            for key in [k for k in self.parts if k[0] == index]:
                del self.parts[key]  # a block started again at this index
            return block.get("type") == "tool_use" and self.hold.begins(index, str(block.get("name") or ""))
        elif kind == "content_block_delta" and index in self.blocks and isinstance(obj.get("delta"), dict):
            self._delta(index, self.blocks[index], obj["delta"])
        return False

    def _delta(self, index: int, block: dict[str, Any], delta: dict[str, Any]) -> None:
        kind = delta.get("type")
        if kind == "input_json_delta":
            self._part(index, "input", str(delta.get("partial_json") or ""))
        elif kind in ("text_delta", "thinking_delta"):
            key = kind.removesuffix("_delta")
            self._part(index, key, str(delta.get(key) or ""))
        elif kind == "signature_delta":
            block["signature"] = delta.get("signature")
        elif kind == "citations_delta":
            self._part(index, "citations", delta.get("citation"))

    def _part(self, index: int, key: str, value: Any) -> None:
        """Append one delta's piece to what the block started with."""
        parts = self.parts.get((index, key))
        if parts is None:
            start = self.blocks[index].get(key)
            if key == "citations":
                parts = list(start) if isinstance(start, list) else []
            else:
                parts = [] if key == "input" else [str(start or "")]
            self.parts[(index, key)] = parts
        parts.append(value)

    def hide(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        if not self.hold.recall:
            return obj
        index = obj.get("index")
        if isinstance(index, int):
            at = self.hold.index(index)
            return None if at is None else obj if at == index else {**obj, "index": at}
        delta = obj.get("delta")
        if obj.get("type") == "message_delta" and isinstance(delta, dict) and \
                delta.get("stop_reason") == "tool_use" and not self.hold.client_calls:
            return {**obj, "delta": {**delta, "stop_reason": "end_turn"}}
        return obj

    def turn(self) -> Turn:
        for (index, key), parts in self.parts.items():
            block = self.blocks[index]
            if key == "citations":
                block[key] = list(parts)
            elif key != "input":
                block[key] = "".join(parts)
            else:
                text = "".join(parts)
                try:
                    block["input"] = json.loads(text) if text.strip() else {}
                except ValueError:
                    block["input"] = {}
        return _turn([self.blocks[i] for i in sorted(self.blocks)])


class Continuity:
    def __init__(self) -> None:
        self.started = 0  # content blocks the client was told of
        self.shift = 0

    def start(self, follow: bool) -> None:
        self.shift = self.started

    def event(self, obj: dict[str, Any], follow: bool,
              usages: list[dict[str, Any]]) -> dict[str, Any] | None:
        kind = obj.get("type")
        out = obj
        if follow:
            if kind == "message_start":
                return None
            if isinstance(obj.get("index"), int):
                out = {**obj, "index": obj["index"] + self.shift}
            if kind == "message_delta" and isinstance(obj.get("usage"), dict) and usages:
                summed = sum_counts({**usages[-1], **obj["usage"]}, usages)
                out = {**obj, "usage": {k: v for k, v in summed.items()
                                        if isinstance(v, (int, dict)) or k in obj["usage"]}}
        if kind == "content_block_start" and isinstance(out.get("index"), int):
            self.started = max(self.started, out["index"] + 1)
        return out


class AnthropicWire(WireBase):

    def can_offer(self, data: dict[str, Any]) -> bool:
        if not may_call(data):
            return False
        messages = data.get("messages")
        last = messages[-1] if isinstance(messages, list) and messages else None
        return isinstance(last, dict) and last.get("role") == "user"

    def turn(self, data: dict[str, Any]) -> Turn:
        return _turn(data.get("content"))

    def follow_up(self, sent: dict[str, Any], rounds: list[Round], last: bool) -> bytes:
        body = dict(sent)
        messages = list(body.get("messages") or [])
        for turn, results in rounds:
            messages.append({"role": "assistant", "content": repeated(turn.reply, ("tool_use",))})
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": c.id, "content": r}
                for c, r in zip(turn.calls, results)]})
        body["messages"] = messages
        return finish_body(body, last)


ANTHROPIC = AnthropicWire("anthropic", TOOL, Reader, Continuity)
