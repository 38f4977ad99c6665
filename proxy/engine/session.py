"""Session ids: the ``X-Session-Id`` header, else derived from the caller and the task.

The caller's scope is an HMAC-SHA256 (full length, 64 hex digits) of every credential
the request presents (the dialect's ``credential``: each of its key headers that is set,
the query's key, and the client token of ``X-Context-Engine-Token``, which never goes
upstream), keyed with the session key. One credential scopes as its value alone
(whichever header carries it); several scope as their canonical list (``presented``),
so two callers who differ in any credential the upstream may check (the same dummy
``Authorization``, different ``x-api-key``) never share a scope. A header id becomes
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
TOKEN_HEADER = "x-context-engine-token"  # the client token (``proxy.edge.exposure``)
DEFAULT_KEY_HEADERS = ("authorization", "api-key", "x-api-key", TOKEN_HEADER)


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
               secret: str | None = None, caller: str = "") -> str:
    """``caller``: the scope when the caller already computed it (``caller_hash``)."""
    caller = caller or caller_hash(headers, key, secret)
    given = headers.get(HEADER, "").strip()
    if given:
        return f"{given[:200]}~{caller}"
    blob = json.dumps([caller, _first(messages, INSTRUCTION_ROLES),
                       _first(messages, ("user",))], ensure_ascii=False)
    return "s-" + hashlib.sha256(blob.encode()).hexdigest()[:24]


def presented(found: list[tuple[str, str]]) -> str:
    """The credentials a request presents (``(where, value)`` pairs, blank values left
    out) as one string: "" for none, the value alone for one (a key keeps its scope
    whichever header carries it), else the sorted pairs as JSON."""
    pairs = sorted((where, value) for where, value in found if value.strip())
    if len(pairs) <= 1:
        return pairs[0][1] if pairs else ""
    return json.dumps(pairs, ensure_ascii=False)


def caller_hash(headers: Mapping[str, str], key: bytes, secret: str | None = None) -> str:
    """The caller's scope: a keyed hash of its credentials (``secret``, as its dialect
    found them; by default those of ``DEFAULT_KEY_HEADERS``), so memory is scoped per
    caller."""
    if secret is None:
        secret = presented([(n, headers.get(n, "")) for n in DEFAULT_KEY_HEADERS])
    return hmac.new(key, secret.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()
