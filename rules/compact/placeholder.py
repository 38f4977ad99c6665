"""The in-place text of a cleared message: its ``orig:`` id and what a next call takes
from it (a result's skeleton and identifiers; an assistant turn's fenced commands)."""

from __future__ import annotations

from typing import Any

from context_engine.proxy.engine.messages import text_of
from context_engine.proxy.engine.originals import original_id
from context_engine.rules.compact.gist import skeleton
from context_engine.rules.compact.inputs import actions
from context_engine.rules.identifiers import identifiers

CLEARED = "[context-engine:cleared]"


def placeholder(m: dict[str, Any], gist_chars: int = 0, input_chars: int = 0,
                ids: bool = False) -> str | None:
    """The in-place text of a cleared message (a function of its content alone): its
    ``orig:`` id and, for a result, its skeleton (``gist.py``) and with ``ids`` its
    identifiers (``identifiers.py``; None: too many to list, keep the result); for an
    assistant turn, the fenced commands it holds when ``input_chars`` is set
    (``inputs.actions``: pass it for a text-action agent's turns only)."""
    text = text_of(m)
    head = f"{CLEARED} {original_id(text)}"
    if m.get("role") == "assistant":
        acted = actions(text, input_chars, CLEARED, original_id(text))
        return f"{head}\n{acted}" if acted else head
    gist = skeleton(text, gist_chars)
    listed = identifiers(text, gist) if ids else ""
    if listed is None:
        return None
    gist = "\n".join(p for p in (gist, listed) if p)
    return f"{head}: {gist}" if gist else head
