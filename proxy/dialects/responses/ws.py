"""The Responses API over a WebSocket (``/v1/responses``, as Codex CLI speaks it): how a
client's message splits into its framing and the body an HTTP POST would carry, and how
the proxy's own errors go back as events.

A turn is one text message ``{"type": "response.create", ...}``: the rest of its members
are a ``POST /v1/responses`` body (``model``, ``instructions``, ``input``, ``tools``,
``previous_response_id``, ...). ``read`` cuts the ``type`` member out (``body``: the
bytes the HTTP dialect parses and rewrites); ``frame`` puts it back, first, as Codex
writes it (a body the rewrite left alone goes out as the message the client sent). The
server's events are the HTTP stream's events, one JSON text message each; an ``error``
event (``{"type": "error", "status": 400, "error": {...}}``) ends a turn as a failure.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from context_engine.proxy.dialects.jsonspan import object_spans, skip_ws
from context_engine.proxy.errors import BadRequest, ProxyError

CREATE = "response.create"
ERROR = "error"
_TYPE_MEMBER = re.compile(r'"type"[ \t\r\n]*:[ \t\r\n]*$')


@dataclass(frozen=True)
class Message:
    """One client message: its ``type``, its text as sent, and (``response.create``)
    the body without the ``type`` member."""

    kind: str
    raw: str
    body: bytes = b""
    member: str = ""  # the ``"type": "response.create"`` member's own text

    @property
    def creates(self) -> bool:
        return self.kind == CREATE


def read(text: str) -> Message:
    """The message, or ``BadRequest`` when it is not a JSON object with a string ``type``."""
    try:
        data, spans = object_spans(text)
    except ValueError:
        raise BadRequest("The message is not a JSON object.") from None
    kind = data.get("type")
    if not isinstance(kind, str):
        raise BadRequest("The message has no string 'type'.", param="type")
    if kind != CREATE:
        return Message(kind, text)
    begin, end = spans["type"]
    key = _TYPE_MEMBER.search(text, 0, begin)
    if key is None:  # an escaped key: the body is re-serialized without it
        rest = {k: v for k, v in data.items() if k != "type"}
        return Message(kind, text, json.dumps(rest, ensure_ascii=False).encode(), '"type":' +
                       json.dumps(CREATE))
    start, after = key.start(), skip_ws(text, end)
    if text[after] == ",":  # a member follows: take its comma
        cut = (start, skip_ws(text, after + 1))
    else:  # the last member: take the comma before it, if any
        before = start
        while before > 0 and text[before - 1] in " \t\r\n":
            before -= 1
        cut = (before - 1, after) if text[before - 1] == "," else (start, after)
    body = text[:cut[0]] + text[cut[1]:]
    return Message(kind, text, body.encode("utf-8"), text[start:end])


def frame(message: Message, out: bytes) -> str:
    """The upstream message for the body ``out``: the client's own text when ``out`` is
    its body unchanged, else ``out`` with the ``type`` member put back first."""
    if out == message.body:
        return message.raw
    text = out.decode("utf-8")
    i = skip_ws(text, 1)
    sep = "" if text[i:i + 1] == "}" else ","
    return "{" + message.member + sep + text[1:]


def previous_id(message: Message) -> str:
    """The ``previous_response_id`` a ``response.create`` continues ("" when none)."""
    try:
        value = json.loads(message.body).get("previous_response_id")
    except ValueError:
        return ""
    return value if isinstance(value, str) else ""


def with_previous(message: Message, response_id: str) -> Message:
    """``message`` continuing ``response_id`` instead of the one it names."""
    text = message.body.decode("utf-8")
    begin, end = object_spans(text)[1]["previous_response_id"]
    body = (text[:begin] + json.dumps(response_id) + text[end:]).encode("utf-8")
    return Message(message.kind, frame(message, body), body, message.member)


def error_event(exc: ProxyError) -> str:
    """The proxy's own error as the API's ``error`` event (the HTTP status inside)."""
    error: Any = json.loads(exc.body()).get("error")
    return json.dumps({"type": ERROR, "status": exc.status, "error": error})


def event_status(obj: Any) -> int:
    """The status an ``error`` event carries (500 when it names none)."""
    status = obj.get("status", obj.get("status_code")) if isinstance(obj, dict) else None
    return status if isinstance(status, int) and 400 <= status < 600 else 500


def event_error(obj: Any) -> str:
    """An ``error`` event's message, for the ledger row."""
    error = obj.get("error") if isinstance(obj, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return str(message or "upstream error event")[:500]
