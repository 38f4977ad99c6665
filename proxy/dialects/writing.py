"""What the dialects' writers share (``Dialect.write``: a fresh request holding a neutral
conversation, the generator half of a dialect; the bench writes its cases with it)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from context_engine.proxy.engine.opaque import PLACEHOLDER

Opaque = Callable[[int], dict[str, Any]] | None  # an opaque item for assistant turn n, to add


def text_of(content: Any) -> str:
    """A neutral content's text, its parts joined by newlines."""
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") for p in content or () if isinstance(p, dict) and p != PLACEHOLDER)


def call_arguments(call: dict[str, Any]) -> dict[str, Any]:
    """A neutral tool call's arguments as an object (APIs that take an object)."""
    try:
        args = json.loads(call["function"].get("arguments") or "{}")
    except ValueError:
        args = {"raw": call["function"].get("arguments")}
    return args if isinstance(args, dict) else {"value": args}
