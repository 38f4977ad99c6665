"""Session ids: the ``X-Session-Id`` header, else derived from the caller and the task.

The caller's scope is an HMAC-SHA256 (full length, 64 hex digits) of the caller's key
(where its API carries it: the dialect's ``credential``; by default ``Authorization``,
``api-key`` or ``x-api-key``), keyed with the session key. A header id becomes
``<header>~<scope>``: the same header value from two keys is two sessions, and no one
can search for a key whose scope collides with another caller's. The derived id hashes
the scope with the system prompt and the first user message, so the same agent task
keeps one id across its turns.

The session key is ``session_key`` when set (a random secret: set it in production).
Otherwise it is derived from the ``store`` location, so replicas sharing one Redis
store compute the same ids without extra configuration, and separate deployments
differ. Changing the key starts every session afresh (memories stay under old ids).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any

from context_engine.proxy.engine.messages import INSTRUCTION_ROLES, text_of

HEADER = "x-session-id"


def session_key(configured: str, store: str) -> bytes:
    """The HMAC key for caller scopes: ``configured`` if set, else derived from ``store``."""
    if configured:
        return configured.encode("utf-8", "surrogatepass")
    seed = b"context-engine session scope\x00" + store.encode("utf-8", "replace")
    return hashlib.sha256(seed).digest()


def _first(messages: list[Any], roles: tuple[str, ...]) -> str:
    for m in messages:
        if m.get("role") in roles:
            return text_of(m)
    return ""


def session_id(headers: Mapping[str, str], messages: list[Any], key: bytes,
               secret: str | None = None) -> str:
    caller = caller_hash(headers, key, secret)
    given = headers.get(HEADER, "").strip()
    if given:
        return f"{given[:200]}~{caller}"
    blob = json.dumps([caller, _first(messages, INSTRUCTION_ROLES),
                       _first(messages, ("user",))], ensure_ascii=False)
    return "s-" + hashlib.sha256(blob.encode()).hexdigest()[:24]


def caller_hash(headers: Mapping[str, str], key: bytes, secret: str | None = None) -> str:
    """The caller's scope: a keyed hash of its API key (``secret``, as its dialect found
    it), so memory is scoped per caller."""
    if secret is None:
        secret = (headers.get("authorization", "") or headers.get("api-key", "")
                  or headers.get("x-api-key", ""))
    return hmac.new(key, secret.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()
