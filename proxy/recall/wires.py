"""Each API's recall wire, by adapter name (``chat``, ``responses``, ``anthropic``)."""

from __future__ import annotations

from context_engine.proxy.recall.tool import CHAT
from context_engine.proxy.recall.wire import Wire
from context_engine.proxy.recall.wire_anthropic import ANTHROPIC
from context_engine.proxy.recall.wire_responses import RESPONSES

WIRES: dict[str, Wire] = {w.name: w for w in (CHAT, RESPONSES, ANTHROPIC)}
