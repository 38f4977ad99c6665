"""Wire-format adapters: each API's request ⇄ the neutral (chat-completions) form.

An adapter is a module-like object with ``name``, ``parse(raw) -> Parsed`` (raises a
``ProxyError`` for a bad request) and ``error_body(exc) -> bytes`` (the proxy's own
errors in that API's shape). ``Parsed.splice(messages)`` writes the rules' result back
into the client's exact bytes; the caller sends the original when it raises.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from context_engine.proxy.adapters import anthropic, chat, responses
from context_engine.proxy.adapters.base import Parsed
from context_engine.proxy.errors import ProxyError


@dataclass(frozen=True)
class Adapter:
    name: str
    parse: Callable[[bytes], Parsed]
    error_body: Callable[[ProxyError], bytes]


CHAT = Adapter("chat", chat.parse, chat.error_body)
RESPONSES = Adapter("responses", responses.parse, responses.error_body)
ANTHROPIC = Adapter("anthropic", anthropic.parse, anthropic.error_body)
ADAPTERS = {a.name: a for a in (CHAT, RESPONSES, ANTHROPIC)}
