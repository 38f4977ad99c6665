"""Parse a chat-completions body and splice new messages into it.

The upstream body must be the client's JSON with only ``messages`` replaced: every other
field keeps its exact bytes. ``parse_body`` walks the top-level object once with the C
JSON scanner and remembers where the ``messages`` value lies in the text; ``splice``
puts the new messages there.

JSON may escape lone UTF-16 surrogates (``"\ud800"``, a JS-truncated emoji). Python
decodes them into strings that cannot be encoded as UTF-8, so nothing downstream
(tokenizer, session hash, ledger) could handle them. Such a body is forwarded as sent,
never rewritten: ``data`` then holds a copy with each lone surrogate replaced by U+FFFD,
for counting and the ledger only, and ``rewritable`` is false.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from proxy.errors import BadRequest

_decoder = json.JSONDecoder()
_WS = " \t\n\r"
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class ParsedBody:
    text: str
    data: dict[str, Any]
    messages_span: tuple[int, int]
    rewritable: bool = True


def _skip_ws(s: str, i: int) -> int:
    while i < len(s) and s[i] in _WS:
        i += 1
    return i


def _walk_object(s: str) -> tuple[dict[str, Any], tuple[int, int] | None]:
    i = _skip_ws(s, 0)
    if i >= len(s) or s[i] != "{":
        raise ValueError("the body must be a JSON object")
    data: dict[str, Any] = {}
    span = None
    i = _skip_ws(s, i + 1)
    if i < len(s) and s[i] == "}":
        return data, None
    while True:
        if i >= len(s) or s[i] != '"':
            raise ValueError(f"expected a key at char {i}")
        key, i = _decoder.raw_decode(s, i)
        i = _skip_ws(s, i)
        if i >= len(s) or s[i] != ":":
            raise ValueError(f"expected ':' at char {i}")
        i = _skip_ws(s, i + 1)
        start = i
        value, i = _decoder.raw_decode(s, i)
        data[key] = value
        if key == "messages":
            span = (start, i)
        i = _skip_ws(s, i)
        if i < len(s) and s[i] == ",":
            i = _skip_ws(s, i + 1)
            continue
        if i < len(s) and s[i] == "}":
            break
        raise ValueError(f"expected ',' or '}}' at char {i}")
    if _skip_ws(s, i + 1) != len(s):
        raise ValueError("extra data after the JSON object")
    return data, span


def parse_body(raw: bytes) -> ParsedBody:
    """Parse and validate a chat-completions body; raise ``BadRequest`` on any problem."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest("The request body is not valid UTF-8.") from None
    try:
        data, span = _walk_object(text)
    except (ValueError, RecursionError) as exc:
        raise BadRequest(f"The request body is not valid JSON: {exc}") from None
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
    if "\\u" in text and re.search(r"\\u[dD][89a-fA-F]", text):
        try:
            scrubbed = _scrub(data)
        except RecursionError:
            raise BadRequest("The request body is nested too deeply.") from None
        if scrubbed != data:
            return ParsedBody(text, scrubbed, span, rewritable=False)
    return ParsedBody(text, data, span)


def _scrub(value: Any) -> Any:
    """``value`` with every lone surrogate (in keys too) replaced by U+FFFD."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    if isinstance(value, dict):
        return {_scrub(k): _scrub(v) for k, v in value.items()}
    return value


def dump_messages(messages: list[Any]) -> str:
    """The canonical serialisation of rewritten messages (deterministic)."""
    return json.dumps(messages, ensure_ascii=False, separators=(",", ":"))


def splice(body: ParsedBody, messages: list[Any]) -> bytes:
    start, end = body.messages_span
    return (body.text[:start] + dump_messages(messages) + body.text[end:]).encode("utf-8")
