"""Answers one ``context_recall`` call from the caller's own session.

A call names an ``id`` (``orig:<12 hex>`` from a marker, ``#n`` for the client's message
``n``, or ``#a-#b``) or a ``query`` (words searched with BM25 in the turns this request
does not show in full). The answer comes from this request's own messages first (the
client resends its history), then, for an ``orig:`` id this request's markers name, from
the caller's own part of the store (``originals.store_key``). Nothing outside the
caller's request and markers is reachable: another caller's ids are "not found". A bad or unknown id answers a short "not found" line,
never an error. When a rule offering ``Fencing`` (``zones``) ran, the answer is fenced.

Limits (``resolve_calls``): the calls of one reply are resolved together in the request
lane (``engine.lanes``), never on the event loop; past ``max_calls`` a call answers "too
many calls"; the BM25 index over the hidden turns is built once per request, on its
first query; all the text one request recalls is at most ``max_total_chars`` (later
calls answer that the budget is spent), which bounds the follow-up's size.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from rank_bm25 import BM25Okapi

from context_engine.proxy.engine.lanes import RequestLane
from context_engine.proxy.engine.messages import is_instruction, text_of
from context_engine.proxy.engine.originals import original_id, reference_id, stored_original
from context_engine.proxy.store.stores import Store, StoreUnavailable

TOOL_NAME = "context_recall"
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
    max_total_chars: int = 96000  # recalled text over all of this request's calls
    spent: int = 0  # recalled text so far
    _index: Index | None = field(default=None, init=False, repr=False)
    _tool_ids: dict[str, str] | None = field(default=None, init=False, repr=False)

    def index(self) -> Index:
        """The BM25 index over the turns a query searches, built on first use."""
        if self._index is None:
            self._index = Index.build(self)
        return self._index

    def tool_content(self, ref: str) -> str | None:
        """The client's tool result whose id is ``ref`` (each hashed once per request)."""
        if self._tool_ids is None:
            self._tool_ids = {}
            for m in self.original:
                content = m.get("content") if isinstance(m, dict) else None
                if m.get("role") == "tool" and isinstance(content, str):
                    self._tool_ids.setdefault(original_id(content), content)
        return self._tool_ids.get(ref)


@dataclass
class Index:
    pool: list[int]  # client message indexes searched
    bm25: BM25Okapi | None  # None: nothing to search

    @staticmethod
    def build(scope: RecallScope) -> Index:
        pool = scope.hidden or [i for i, m in enumerate(scope.original)
                                if isinstance(m, dict) and not is_instruction(m)]
        docs = [terms(render_turn(scope.original, i)) for i in pool]
        return Index(pool, BM25Okapi([d or [""] for d in docs]) if any(docs) else None)


TOO_MANY = "not answered: too many context_recall calls in one reply (at most {n}); call again with the ones you need"
SPENT = "not answered: this request's recall budget ({n:,} characters) is spent; answer with what you have"
BUSY = "not answered: the proxy is busy; answer with what you have"


async def resolve_calls(scope: RecallScope, calls: list[Any], *, lane: RequestLane | None,
                        session: str, max_calls: int, deadline_s: float | None) -> list[str]:
    """The results of one reply's calls (their ``arguments``), in order: the first
    ``max_calls`` resolved in ``lane`` behind the session's other work (inline without
    a lane), the rest "too many calls"; past ``deadline_s`` or with the lane full, "busy"."""
    answered, rest = calls[:max_calls], [TOO_MANY.format(n=max_calls)] * len(calls[max_calls:])

    def work() -> list[str]:
        return [resolve(scope, a) for a in answered]

    if lane is None or not answered:
        return work() + rest
    job = lane.submit(session, work, scope.caller)
    if job is None:
        return [BUSY] * len(answered) + rest
    try:
        done = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(job.future)), deadline_s)
    except TimeoutError:
        job.abandon()
        return [BUSY] * len(answered) + rest
    return cast("list[str]", done) + rest if done is not None else [BUSY] * len(answered) + rest


def resolve(scope: RecallScope, arguments: Any) -> str:
    """The tool result for one call's ``arguments`` (a JSON string or a dict)."""
    room = min(scope.max_chars, scope.max_total_chars - scope.spent)
    if room <= 0:
        return SPENT.format(n=scope.max_total_chars)
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
    if len(text) > room:
        text = text[:room] + f"\n[… {len(text) - room:,} more characters cut]"
    scope.spent += min(len(text), room)
    return scope.fence(text) if scope.fence is not None else text


def _arguments(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return {}
    return arguments if isinstance(arguments, dict) else {}


def _by_id(scope: RecallScope, ident: str) -> str | None:
    found = reference_id(ident.lower())
    if found:
        return _original(scope, found)
    turns = _TURNS.match(ident)
    if turns is None:
        return None
    a = int(turns.group(1))
    b = int(turns.group(2) or a)
    if a > b or a >= len(scope.original):
        return None
    parts, size = [], 0
    for i in range(a, min(b, len(scope.original) - 1) + 1):
        if size > scope.max_chars:  # cut anyway: render no more than can be shown
            break
        parts.append(render_turn(scope.original, i))
        size += len(parts[-1]) + 1
    return "\n".join(parts)


def _original(scope: RecallScope, digest: str) -> str | None:
    ref = "orig:" + digest
    own = scope.tool_content(ref)
    if own is not None:
        return own
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
    words = terms(query)
    index = scope.index() if words else None
    if index is None or index.bm25 is None:
        return ""
    pool = index.pool
    scores = index.bm25.get_scores(words)
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
