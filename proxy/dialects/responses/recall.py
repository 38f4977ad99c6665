"""``context_recall`` on the Responses API (``POST /v1/responses``): a ``dialects.recall_wire.Wire``.

- The tool is a ``{"type": "function", "name": "context_recall", ..., "strict": false}``
  after the client's tools (``strict`` spelled out: its schema has optional fields).
- Not offered (markers say ``no recall tool here``) when the client sent no tools, a
  ``tool_choice`` that rules it out (``none``, one named tool, ``allowed_tools``), a
  ``conversation`` (its items would keep the recall call), ``background``, or a stream
  the server stores (``store`` not false): a streamed reply goes out under the first
  reply's id, and chaining from that stored response would meet an unanswered call.
- A reply's calls are its ``function_call`` output items. The follow-up is the request
  as sent with ``input`` extended by the reply's output items (the client's own calls
  left out: they are asked again) and one ``function_call_output`` per recall call;
  ``previous_response_id`` stays the client's. With ``store: false``, reasoning items
  without ``encrypted_content`` cannot be sent back: they are left out and the other
  items go without their ids.
- Stream: held from the first ``function_call`` item named ``context_recall``. The client
  sees one response: the follow-up's ``response.created``/``in_progress`` are left out,
  its ``sequence_number`` continues the client's, its ``output_index`` comes after the
  items the client already has, and its ``response.completed`` carries the first
  reply's id, every item the client saw and the usage summed over rounds.
"""

from __future__ import annotations

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

TOOL: dict[str, Any] = {"type": "function", "name": TOOL_NAME, "description": DESCRIPTION,
                        "parameters": PARAMETERS, "strict": False}
CALLS = ("function_call", "custom_tool_call")
ENDS = ("response.completed", "response.incomplete", "response.failed")
STARTS = ("response.created", "response.in_progress", "response.queued")


def _turn(output: Any) -> Turn:
    items = output if isinstance(output, list) else []
    calls, others = split_calls(items, ("function_call",), "arguments", "call_id")
    return Turn(items, calls, others + sum(1 for i in items if isinstance(i, dict)
                                           and i.get("type") == "custom_tool_call"))


def _items(turn: Turn, stateless: bool) -> list[Any]:
    """The reply's output items the follow-up repeats."""
    out = repeated(turn.reply, CALLS)
    if not stateless:
        return out
    kept = [i for i in out if i.get("type") != "reasoning" or i.get("encrypted_content")]
    if len(kept) == len(out):
        return out
    return [i if i.get("type") == "reasoning" else {k: v for k, v in i.items() if k != "id"}
            for i in kept]


class Reader:
    """One streamed reply: its finished items and its final response."""

    def __init__(self) -> None:
        self.items: dict[int, Any] = {}
        self.response: dict[str, Any] | None = None
        self.usage: dict[str, Any] | None = None
        self.hold = Hold()

    def take(self, obj: dict[str, Any]) -> bool:
        kind = obj.get("type")
        item = obj.get("item")
        if kind == "response.output_item.added":
            if not isinstance(item, dict) or item.get("type") not in CALLS:
                return False
            index = obj.get("output_index")
            return self.hold.begins(index if isinstance(index, int) else -1,
                                    str(item.get("name") or "") if item.get("type") == "function_call" else "")
        if kind == "response.output_item.done" and isinstance(obj.get("output_index"), int):
            self.items[obj["output_index"]] = item
        elif kind in ENDS and isinstance(obj.get("response"), dict):
            self.response = obj["response"]
            usage = self.response.get("usage")
            self.usage = usage if isinstance(usage, dict) else None
        return False

    def hide(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        if not self.hold.recall:
            return obj
        index = obj.get("output_index")
        if isinstance(index, int):
            at = self.hold.index(index)
            if at is None:
                return None
            obj = obj if at == index else {**obj, "output_index": at}
        response = obj.get("response")
        if isinstance(response, dict) and isinstance(response.get("output"), list):
            output = [i for i in response["output"] if not (isinstance(i, dict) and i.get(
                "type") == "function_call" and i.get("name") == TOOL_NAME)]
            if len(output) != len(response["output"]):
                obj = {**obj, "response": {**response, "output": output}}
        return obj

    def turn(self) -> Turn:
        output = (self.response or {}).get("output")
        return _turn(output if isinstance(output, list) and output
                     else [self.items[i] for i in sorted(self.items)])


class Continuity:
    def __init__(self) -> None:
        self.first_id: Any = None
        self.next_seq = 0
        self.added = 0  # output items the client was told of
        self.shift = 0  # what the reply being relayed adds to its output_index
        self.seen: list[Any] = []  # finished items the client got
        self.before: list[Any] = []  # ... from the replies before this one

    def start(self, follow: bool) -> None:
        self.shift, self.before = self.added, list(self.seen)

    def event(self, obj: dict[str, Any], follow: bool,
              usages: list[dict[str, Any]]) -> dict[str, Any] | None:
        kind = obj.get("type")
        if kind in STARTS and follow:
            return None
        out = obj
        if follow:
            out = {**obj, "sequence_number": self.next_seq} if "sequence_number" in obj else dict(obj)
            if isinstance(obj.get("output_index"), int):
                out["output_index"] = obj["output_index"] + self.shift
            if kind in ENDS and isinstance(obj.get("response"), dict):
                out["response"] = self._final(obj["response"], usages)
        elif kind == "response.created" and isinstance(obj.get("response"), dict):
            self.first_id = obj["response"].get("id")
        if isinstance(out.get("sequence_number"), int):
            self.next_seq = out["sequence_number"] + 1
        if kind == "response.output_item.added":
            self.added = max(self.added, int(out.get("output_index") or 0) + 1)
        elif kind == "response.output_item.done":
            self.seen.append(out.get("item"))
        return out

    def _final(self, response: dict[str, Any], usages: list[dict[str, Any]]) -> dict[str, Any]:
        out = dict(response)
        if self.first_id is not None:
            out["id"] = self.first_id
        if isinstance(response.get("output"), list):
            out["output"] = self.before + response["output"]
        if isinstance(response.get("usage"), dict):
            out["usage"] = sum_counts(response["usage"], usages)
        return out


class ResponsesWire(WireBase):

    def can_offer(self, data: dict[str, Any]) -> bool:
        if not may_call(data):
            return False
        if data.get("conversation") or data.get("background"):
            return False
        return not (data.get("stream") is True and data.get("store") is not False)

    def turn(self, data: dict[str, Any]) -> Turn:
        return _turn(data.get("output"))

    def follow_up(self, sent: dict[str, Any], rounds: list[Round], last: bool) -> bytes:
        body = dict(sent)
        given = body.get("input")
        items: list[Any] = [{"role": "user", "content": given}] if isinstance(given, str) \
            else list(given) if isinstance(given, list) else []
        for turn, results in rounds:
            items += _items(turn, sent.get("store") is False)
            items += [{"type": "function_call_output", "call_id": c.id, "output": r}
                      for c, r in zip(turn.calls, results)]
        body["input"] = items
        return finish_body(body, last)


RESPONSES = ResponsesWire("responses", TOOL, Reader, Continuity)
