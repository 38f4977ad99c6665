"""Gemini's parts as the rules see them, and back: which unit a part is, a
``functionResponse``'s text and its object again, a call's part, text parts.

A text part with only ``text`` is content; a ``functionCall`` (in a ``model`` content)
a call; a ``functionResponse`` (in any other) a result; anything else is opaque.
"""

from __future__ import annotations

import json
from typing import Any

from context_engine.proxy.dialects.base import Unit, dumps
from context_engine.proxy.engine.opaque import PLACEHOLDER

SYNTHETIC = "gemini-"  # the prefix of the ids given to calls without one (never sent)


def model_of(path: str) -> tuple[str, bool]:
    """The model a path names, and whether it asks for a stream."""
    tail = path.rpartition("/models/")[2]
    model, _, method = tail.partition(":")
    return model, method == "streamGenerateContent"


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
    for p in content or ():
        if p == PLACEHOLDER or not isinstance(p, dict):
            continue
        part = {"text": p.get("text", "")} if p.get("type") == "text" else p
        out.append(next((u.raw for u in originals if u.obj == part), None) or dumps(part))
    return out


def call_part(call: dict[str, Any], base: dict[str, Any] | None = None) -> str:
    fn = call.get("function") or {}
    fc = dict((base or {}).get("functionCall") or {})
    fc.update(name=fn.get("name", ""), args=json.loads(fn.get("arguments") or "{}"))
    if not str(call.get("id", "")).startswith(SYNTHETIC) and call.get("id"):
        fc["id"] = call["id"]
    return dumps({**(base or {}), "functionCall": fc})
