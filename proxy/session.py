"""Session ids: the ``X-Session-Id`` header, else derived from the caller and the task.

The derived id hashes a hash of the caller's key together with the system prompt and
the first user message, so the same agent task keeps one id across its turns, and two
callers (different keys) never share a session even with identical prompts.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping

from rules.base import text_of

HEADER = "x-session-id"


def _first(messages: list[Any], roles: tuple[str, ...]) -> str:
    for m in messages:
        if m.get("role") in roles:
            return text_of(m)
    return ""


def session_id(headers: Mapping[str, str], messages: list[Any]) -> str:
    caller = caller_hash(headers)
    given = headers.get(HEADER, "").strip()
    if given:
        # scoped by the caller: the same header value from two keys is two sessions
        return f"{given[:200]}~{caller[:8]}"
    blob = json.dumps([caller, _first(messages, ("system", "developer")),
                       _first(messages, ("user",))], ensure_ascii=False)
    return "s-" + hashlib.sha256(blob.encode()).hexdigest()[:24]


def caller_hash(headers: Mapping[str, str]) -> str:
    """A short hash of the caller's key, so memory can be scoped per caller."""
    key = headers.get("authorization", "") or headers.get("api-key", "")
    return hashlib.sha256(key.encode()).hexdigest()[:16]
