"""Chat Completions: the neutral form itself; ``context_engine.proxy.adapters.body`` parses and splices it."""

from __future__ import annotations

from typing import Any

from context_engine.proxy.adapters.base import Parsed
from context_engine.proxy.adapters.body import ParsedBody, parse_body, splice
from context_engine.proxy.errors import ProxyError


def _splicer(body: ParsedBody, raw: bytes) -> Any:
    def put(messages: list[Any]) -> bytes:
        return raw if messages == body.data["messages"] else splice(body, messages)
    return put


def parse(raw: bytes) -> Parsed:
    body = parse_body(raw)
    return Parsed(body.data, body.data, body.data.get("stream") is True, _splicer(body, raw),
                  rewritable=body.rewritable)


def error_body(exc: ProxyError) -> bytes:
    return exc.body()
