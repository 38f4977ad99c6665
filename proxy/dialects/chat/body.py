"""Parse a chat-completions body and splice new messages into it.

The upstream body must be the client's JSON with only ``messages`` replaced: every other
field keeps its exact bytes. ``parse_body`` walks the top-level object once with the C
JSON scanner (``context_engine.proxy.dialects.jsonspan``) and remembers where the ``messages`` value lies in
the text; ``splice`` puts the new messages there.

JSON may escape lone UTF-16 surrogates (``"\ud800"``, a JS-truncated emoji). Python
decodes them into strings that cannot be encoded as UTF-8, so nothing downstream
(tokenizer, session hash, ledger) could handle them. Such a body is forwarded as sent,
never rewritten: ``data`` then holds a copy with each lone surrogate replaced by U+FFFD,
for counting and the ledger only, and ``rewritable`` is false.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from context_engine.proxy.dialects.jsonspan import decode_request
from context_engine.proxy.errors import BadRequest


@dataclass(frozen=True)
class ParsedBody:
    text: str
    data: dict[str, Any]
    messages_span: tuple[int, int]
    rewritable: bool = True


def parse_body(raw: bytes) -> ParsedBody:
    """Parse and validate a chat-completions body; raise ``BadRequest`` on any problem."""
    text, data, spans, rewritable = decode_request(raw, BadRequest)
    span = spans.get("messages")
    messages = data.get("messages")
    if span is None:
        raise BadRequest("Missing required parameter: 'messages'.", param="messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty array.", param="messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise BadRequest(f"messages[{i}] must be an object with a string 'role'.",
                             param=f"messages[{i}]")
        content = m.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise BadRequest(f"messages[{i}].content must be a string, an array or null.",
                             param=f"messages[{i}].content")
    if "model" in data and not isinstance(data["model"], str):
        raise BadRequest("'model' must be a string.", param="model")
    return ParsedBody(text, data, span, rewritable=rewritable)


def dump_messages(messages: list[Any]) -> str:
    """The canonical serialisation of rewritten messages (deterministic)."""
    return json.dumps(messages, ensure_ascii=False, separators=(",", ":"))


def splice(body: ParsedBody, messages: list[Any]) -> bytes:
    start, end = body.messages_span
    return (body.text[:start] + dump_messages(messages) + body.text[end:]).encode("utf-8")
