"""Answers one ``context_recall`` call from the caller's own session.

A call names an ``id`` (``orig:<12 hex>`` from a marker, ``#n`` for the client's message
``n``, or ``#a-#b``) or a ``query`` (words searched with BM25 in the turns this request
does not show in full). The answer comes from this request's own messages first (the
client resends its history), then, for an ``orig:`` id this request's markers name, from
the caller's own part of the store (``originals.store_key``). Nothing outside the
caller's request and markers is reachable: another caller's ids are "not found". A bad or unknown id answers a short "not found" line,
never an error. When ``zones`` ran, the answer is fenced as a tool zone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rank_bm25 import BM25Okapi

from context_engine.proxy.engine.messages import text_of
from context_engine.proxy.engine.originals import original_id, stored_original
from context_engine.proxy.store.stores import Store, StoreUnavailable

TOOL_NAME = "context_recall"
_ORIG = re.compile(r"^(?:orig:)?([0-9a-f]{12})$")
_TURNS = re.compile(r"^#?(\d{1,7})(?:\s*-\s*#?(\d{1,7}))?$")
QUERY_HITS = 6
_WORDS = re.compile(r"[^\W\d_]+|\d+")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
_STOP = frozenset("a an and are as at be by did do does for from had has have he her his how i "
                  "in is it its me my of on or our she that the their them they this to was "
                  "we were what when where which who why will with you your".split())


def terms(text: str) -> list[str]:
    """BM25 terms: lower-case words without stopwords; CJK runs as character bigrams."""
    out: list[str] = []
    for word in _WORDS.findall(text.lower()):
        if _CJK.match(word):
            out += [word[i:i + 2] for i in range(max(1, len(word) - 1))]
        elif word not in _STOP:
            out.append(word)
    return out


@dataclass
class RecallScope:
    """What one request's recall calls may read."""

    original: list[Any]  # the client's messages, as sent
    ids: set[str] = field(default_factory=set)  # orig:<id> this request's markers name
    hidden: list[int] = field(default_factory=list)  # client turns not shown in full
    store: Store | None = None
    fence: Callable[[str], str] | None = None
    max_chars: int = 24000
    caller: str = ""  # the caller's scope: the store keeps originals per caller


def resolve(scope: RecallScope, arguments: Any) -> str:
    """The tool result for one call's ``arguments`` (a JSON string or a dict)."""
    args = _arguments(arguments)
    ident, query = str(args.get("id") or "").strip().strip("\"'"), str(args.get("query") or "").strip()
    if ident:
        text = _by_id(scope, ident)
        if text is None:
            return f"not found: {ident[:80]} (no such id in this conversation)"
    elif query:
        text = _search(scope, query)
        if not text:
            return f"not found: nothing earlier in this conversation matches {query[:80]!r}"
    else:
        return 'not found: pass an "id" from a marker or a "query"'
    if len(text) > scope.max_chars:
        text = text[:scope.max_chars] + f"\n[… {len(text) - scope.max_chars:,} more characters cut]"
    return scope.fence(text) if scope.fence is not None else text


def _arguments(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return {}
    return arguments if isinstance(arguments, dict) else {}


def _by_id(scope: RecallScope, ident: str) -> str | None:
    found = _ORIG.match(ident.lower())
    if found:
        return _original(scope, found.group(1))
    turns = _TURNS.match(ident)
    if turns is None:
        return None
    a = int(turns.group(1))
    b = int(turns.group(2) or a)
    if a > b or a >= len(scope.original):
        return None
    return "\n".join(render_turn(scope.original, i) for i in range(a, min(b, len(scope.original) - 1) + 1))


def _original(scope: RecallScope, digest: str) -> str | None:
    ref = "orig:" + digest
    for m in scope.original:
        content = m.get("content") if isinstance(m, dict) else None
        if m.get("role") == "tool" and isinstance(content, str) and original_id(content) == ref:
            return content
    if ref not in scope.ids or scope.store is None:
        return None
    try:
        return stored_original(scope.store, ref, scope=scope.caller)
    except StoreUnavailable:
        return None


def render_turn(messages: list[Any], i: int) -> str:
    """``#i role: text`` with the tool calls an assistant message makes."""
    m = messages[i] if isinstance(messages[i], dict) else {}
    role = str(m.get("role") or "?")
    parts = [text_of(m)]
    for c in m.get("tool_calls") or []:
        fn = c.get("function") or {} if isinstance(c, dict) else {}
        parts.append(f"{fn.get('name', '')}({fn.get('arguments', '')})")
    return f"#{i} {role}: " + "\n".join(p for p in parts if p)


def _search(scope: RecallScope, query: str) -> str:
    pool = scope.hidden or [i for i, m in enumerate(scope.original)
                            if isinstance(m, dict) and m.get("role") not in ("system", "developer")]
    words = terms(query)
    docs = [terms(render_turn(scope.original, i)) for i in pool]
    if not words or not any(docs):
        return ""
    scores = BM25Okapi([d or [""] for d in docs]).get_scores(words)
    best = sorted((k for k in range(len(pool)) if scores[k] > 0), key=lambda k: (-scores[k], k))
    picked: list[int] = []
    used = 0
    for k in best[:QUERY_HITS]:
        text = render_turn(scope.original, pool[k])
        if picked and used + len(text) > scope.max_chars:
            break
        picked.append(pool[k])
        used += len(text)
    return "\n".join(render_turn(scope.original, i) for i in sorted(picked))
