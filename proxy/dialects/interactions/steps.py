"""The Interactions API's steps as the rules see them, and back.

``input`` is a string, one content, a list of contents (one user turn) or a list of
steps. Of the steps, ``user_input`` is a user turn, ``function_result`` a tool result
(key: its ``call_id``), ``function_call`` a call (key: its ``id``), ``model_output`` the
model's text; ``thought`` (its signature), server-side tool calls and results
(``google_search_call``, ``code_execution_result``, …) and unknown steps are opaque.
Within a ``user_input`` or ``model_output`` a content with only ``type: "text"`` and
``text`` is text; any other content (images, documents, annotated text) is opaque.
"""

from __future__ import annotations

import json
from typing import Any

from context_engine.proxy.dialects.base import Unit, dumps, plain_text, same_raw
from context_engine.proxy.engine.opaque import PLACEHOLDER

TEXT = ("text",)
SIDES = {"user_input": "user", "function_result": "result"}  # every other step: the model's


def is_text(content: Any) -> bool:
    return isinstance(content, dict) and len(content) == 2 and content.get("type") == "text" \
        and isinstance(content.get("text"), str)


def is_steps(items: list[Any]) -> bool:
    """A list of steps, not of contents (one user turn): its first element is no content
    (``text``, ``image``, ``audio``, ``document``, ``video``)."""
    return bool(items) and not (isinstance(items[0], dict) and items[0].get("type") in CONTENTS)


CONTENTS = frozenset({"text", "image", "audio", "document", "video"})


def step_kind(step: Any) -> str:
    """The unit a step is: message (a user turn), result, call, content (the model's
    text) or opaque."""
    t = step.get("type") if isinstance(step, dict) else None
    if t == "user_input" and isinstance(step.get("content", []), list):
        return "message"
    if t == "function_result" and isinstance(step.get("call_id"), str):
        return "result"
    if t == "function_call" and isinstance(step.get("id"), str) and isinstance(step.get("name"), str):
        return "call"
    if t == "model_output" and isinstance(step.get("content"), list) and \
            all(is_text(c) for c in step["content"]):
        return "content"
    return "opaque"


def message_count(items: list[Any]) -> int:
    """The neutral messages a list of steps makes: one per user turn and per result, one
    per run of the model's steps."""
    n, run = 0, False
    for step in items:
        side = step_kind(step) in ("message", "result")
        n += side or not run
        run = not side
    return n


def user_content(step: dict[str, Any]) -> tuple[Any, list[Any]]:
    """A ``user_input``'s neutral content and its opaque contents."""
    texts = [{"type": "text", "text": c["text"]} for c in step.get("content") or () if is_text(c)]
    held = [c for c in step.get("content") or () if not is_text(c)]
    return plain_text(texts, TEXT) or [PLACEHOLDER], held


def model_text(step: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "text", "text": c["text"]} for c in step["content"]]


def result_text(result: Any) -> Any:
    """A ``function_result``'s ``result`` as the rules see it: a string as it is, a list
    of contents as neutral parts (one text: its string), an object as JSON."""
    if isinstance(result, str):
        return result
    if isinstance(result, list):
        return plain_text([{"type": "text", "text": c["text"]} if is_text(c) else c for c in result],
                          TEXT)
    return dumps(result)


def result_value(original: Any, content: Any) -> Any:
    """Rewritten result text in the original's form (a string, contents, an object)."""
    if isinstance(original, list):
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
        return [p for p in parts or () if p != PLACEHOLDER]
    text = content if isinstance(content, str) else \
        "".join(p.get("text", "") for p in content or () if isinstance(p, dict))
    if isinstance(original, str) or original is None:
        return text
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {"output": text}


def neutral_call(step: dict[str, Any]) -> dict[str, Any]:
    return {"id": step["id"], "type": "function",
            "function": {"name": step["name"], "arguments": dumps(step.get("arguments", {}))}}


def call_step(call: dict[str, Any], base: dict[str, Any] | None = None) -> str:
    fn = call.get("function") or {}
    try:
        args = json.loads(fn.get("arguments") or "{}")
    except ValueError:
        args = {"raw": fn.get("arguments")}
    return dumps({**(base or {"type": "function_call"}), "id": call.get("id", ""),
                  "name": fn.get("name", ""), "arguments": args})


def content_texts(content: Any, originals: list[Unit]) -> list[str]:
    """Content texts for neutral content: an unchanged content keeps its original text."""
    if isinstance(content, str):
        return [dumps({"type": "text", "text": content})] if content else []
    same = same_raw(originals)
    out = []
    for p in content or ():
        if p == PLACEHOLDER or not isinstance(p, dict):
            continue
        part = {"type": "text", "text": p.get("text", "")} if p.get("type") == "text" else p
        out.append(same(part) or dumps(part))
    return out
