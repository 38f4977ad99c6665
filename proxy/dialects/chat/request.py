"""Chat Completions: the neutral form itself; ``context_engine.proxy.dialects.chat.body`` parses and splices it."""

from __future__ import annotations

from typing import Any

from context_engine.proxy.dialects.base import Parsed
from context_engine.proxy.dialects.chat.body import ParsedBody, parse_body, splice


def _splicer(body: ParsedBody, raw: bytes) -> Any:
    def put(messages: list[Any]) -> bytes:
        return raw if messages == body.data["messages"] else splice(body, messages)
    return put


def parse(raw: bytes, path: str = "", max_items: int = 0) -> Parsed:
    """The request (``path``: where it was sent; this API reads everything from the body;
    ``max_items``: the message cap, past which ``over`` is set; the messages are the
    neutral form already, so nothing is left untranslated)."""
    body = parse_body(raw)
    over = max_items > 0 and len(body.data["messages"]) > max_items
    return Parsed(body.data, body.data, body.data.get("stream") is True, _splicer(body, raw),
                  rewritable=body.rewritable, over=over)

