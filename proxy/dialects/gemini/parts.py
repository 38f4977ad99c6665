"""Gemini's parts as the rules see them, and back: which unit a part is, a
``functionResponse``'s text and its object again, a call's part, text parts.

A text part with only ``text`` is content; a ``functionCall`` (in a ``model`` content)
a call; a ``functionResponse`` (in any other) a result; anything else is opaque.
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any

from context_engine.proxy.dialects.base import Unit, dumps, same_raw
from context_engine.proxy.engine.opaque import PLACEHOLDER

ROLES = {"user", "model", "function"}  # the roles read as such (any other: an opaque content)
SYNTHETIC = "gemini-"  # the prefix of the ids given to calls without one (never sent)


def model_of(path: str) -> tuple[str, bool]:
    """The model a path names, and whether it asks for a stream."""
    tail = path.rpartition("/models/")[2]
    model, _, method = tail.partition(":")
    return model, method == "streamGenerateContent"


def message_count(data: dict[str, Any]) -> int:
    """The neutral messages a (checked) request makes, without making them: the system
    message, one per content of an unknown role, else one per ``functionResponse`` part
    plus the main message (when any other part, or none, is left)."""
    system = data.get("systemInstruction")
    n = int(isinstance(system, dict) and bool(system.get("parts")))
    for c in data.get("contents") or ():
        role = c.get("role") or "user"
        if role not in ROLES:
            n += 1
            continue
        results = sum(kind(role, p) == "result" for p in c["parts"])
        n += results + (results < len(c["parts"]) or not c["parts"])
    return n


def kind(role: str, part: Any) -> str:
    """The unit a part is: content, call, result, opaque (or bad: not an object)."""
    if not isinstance(part, dict):
        return "bad"
    if len(part) == 1 and isinstance(part.get("text"), str):
        return "content"
    if role == "model" and isinstance(part.get("functionCall"), dict):
        return "call"
    if role != "model" and isinstance(part.get("functionResponse"), dict):
        return "result"
    return "opaque"


def result_text(response: Any) -> Any:
    """A ``functionResponse.response`` as the rules see it."""
    if isinstance(response, dict) and len(response) == 1:
        (value,) = response.values()
        if isinstance(value, str):
            return value
    return dumps(response)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or () if isinstance(p, dict))


def result_value(original: Any, content: Any) -> Any:
    """The ``response`` object for rewritten result text, in the original's form."""
    text = _text(content)
    if isinstance(original, dict) and len(original) == 1 and \
            isinstance(next(iter(original.values())), str):
        return {next(iter(original)): text}
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {"output": text}


def text_parts(content: Any, originals: list[Unit]) -> list[str]:
    """Part texts for neutral content: an unchanged part keeps its original text."""
    if isinstance(content, str):
        return [dumps({"text": content})] if content else []
    out = []
    same = same_raw(originals)
    for p in content or ():
        if p == PLACEHOLDER or not isinstance(p, dict):
            continue
        part = {"text": p.get("text", "")} if p.get("type") == "text" else p
        out.append(same(part) or dumps(part))
    return out


def call_part(call: dict[str, Any], base: dict[str, Any] | None = None) -> str:
    fn = call.get("function") or {}
    fc = dict((base or {}).get("functionCall") or {})
    fc.update(name=fn.get("name", ""), args=json.loads(fn.get("arguments") or "{}"))
    if not str(call.get("id", "")).startswith(SYNTHETIC) and call.get("id"):
        fc["id"] = call["id"]
    return dumps({**(base or {}), "functionCall": fc})


class OpenCalls:
    """The calls of a request not answered yet, in order: ``take_id`` and ``take_name``
    hand out the oldest one with that id or name and close it, in O(1) amortised (a
    closed call is skipped when its other queue reaches it), so n responses that answer
    nothing cost O(n), not a scan of every open call each."""

    def __init__(self) -> None:
        self.ids: dict[str, deque[tuple[int, str]]] = {}
        self.names: dict[str, deque[tuple[int, str]]] = {}
        self.closed: set[int] = set()
        self.count = 0

    def add(self, name: str, cid: str) -> None:
        self.ids.setdefault(cid, deque()).append((self.count, cid))
        self.names.setdefault(name, deque()).append((self.count, cid))
        self.count += 1

    def take_id(self, cid: str) -> str | None:
        return self._take(self.ids.get(cid))

    def take_name(self, name: str) -> str | None:
        return self._take(self.names.get(name))

    def _take(self, queue: deque[tuple[int, str]] | None) -> str | None:
        while queue:
            n, cid = queue.popleft()
            if n not in self.closed:
                self.closed.add(n)
                return cid
        return None
