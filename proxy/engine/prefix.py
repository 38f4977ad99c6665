"""Prefix signatures: what a provider's prompt cache can match between two requests.

A request is a list of *segments*: the tool definitions first (empty when there are
none), then each message. Its signature holds, per segment, a digest of that segment,
a chained digest (of everything up to and including it) and the cumulative token
count. Two requests share their first k segments exactly when their k-th chained
digests are equal, so a session's cache is a dict from chained digest to tokens.

``cache_control`` markers are left out of every digest (providers key the cache on
content, and a client moves its breakpoint every turn); the segments carrying one are
listed as ``breakpoints``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from context_engine.proxy.engine.tokens import TokenCounter
from context_engine.proxy.store.memo import BoundedCache

MARK = "cache_control"
MAX_BREAKPOINTS = 4  # a provider's limit (Anthropic: a 400 past it)


@dataclass(frozen=True)
class Signature:
    digests: tuple[bytes, ...]  # per segment (0 = tools, i + 1 = message i)
    chain: tuple[bytes, ...]  # per segment: digest of segments 0..i
    ends: tuple[int, ...]  # per segment: tokens of segments 0..i
    breakpoints: tuple[int, ...]  # segments carrying a client cache_control

    @property
    def tokens(self) -> int:
        return self.ends[-1]


def strip_marks(value: Any) -> Any:
    """``value`` without ``cache_control`` keys on it, its parts or its tool entries."""
    if isinstance(value, dict):
        return {k: strip_marks(v) for k, v in value.items() if k != MARK}
    if isinstance(value, list):
        return [strip_marks(v) for v in value]
    return value


def mark_count(items: Any) -> int:
    """The cache_control markers on messages (or tool entries), on themselves or a part."""
    n = 0
    for m in items:
        if isinstance(m, dict):
            content = m.get("content")
            n += (MARK in m) + (sum(isinstance(p, dict) and MARK in p for p in content)
                                if isinstance(content, list) else 0)
    return n


def has_mark(message: Any) -> bool:
    """Whether a message (or tool entry) carries a cache_control, on itself or a part."""
    return mark_count((message,)) > 0


def canonical(value: Any) -> Any:
    """``value`` without markers; a message whose content is one text part reads as
    string content (providers render both the same)."""
    value = strip_marks(value)
    if isinstance(value, dict):
        content = value.get("content")
        if isinstance(content, list) and len(content) == 1 and isinstance(content[0], dict) \
                and content[0].get("type") == "text" and set(content[0]) == {"type", "text"}:
            value["content"] = content[0]["text"]
    return value


def digest(value: Any) -> bytes:
    if isinstance(value, dict) and not has_mark(value) and not isinstance(value.get("content"), list):
        plain = value  # nothing to canonicalise: skip the copy
    else:
        plain = canonical(value)
    blob = json.dumps(plain, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.blake2b(blob.encode("utf-8"), digest_size=16).digest()


def turn_key(message: Any) -> bytes:
    """What names a turn through the rewrites that keep it in place: a tool call's ids or a
    tool result's ``tool_call_id`` (a lossless rule may fold the text beside them); a
    message without ids is named by its content (``digest``)."""
    if isinstance(message, dict):
        calls = message.get("tool_calls")
        ids = [c.get("id") for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []
        if message.get("tool_call_id"):
            ids.append(message.get("tool_call_id"))
        if any(isinstance(i, str) and i for i in ids):
            blob = json.dumps(["turn", message.get("role"), ids], separators=(",", ":"))
            return hashlib.blake2b(blob.encode("utf-8"), digest_size=16).digest()
    return digest(message)


PLAIN = frozenset({"role", "content", "name", "tool_call_id"})


class SegmentCache:
    """(digest, tokens) of plain messages (string content, no other keys), shared by
    every request: clients resend the whole history, so a request costs a hash per old
    message and a JSON dump, hash and token count per new one. Keyed by the message's
    digest (16 bytes, never its text) in an LRU capped by entries and bytes."""

    def __init__(self, max_items: int = 50_000, max_bytes: int = 16 * 1024 * 1024) -> None:
        self.cache: BoundedCache[tuple[str, bytes], tuple[bytes, int]] = BoundedCache(max_items, max_bytes)

    def __len__(self) -> int:
        return len(self.cache)

    @property
    def held_bytes(self) -> int:
        return self.cache.bytes

    def get(self, m: dict[str, Any], counter: TokenCounter) -> tuple[bytes, int]:
        if not (isinstance(m.get("content"), (str, type(None))) and m.keys() <= PLAIN):
            return digest(m), counter.message(m)
        h = hashlib.blake2b(digest_size=16)
        for field in ("role", "content", "name", "tool_call_id"):
            value = m.get(field)
            h.update(b"\x00" if value is None else b"\x01" + str(value).encode("utf-8", "surrogatepass") + b"\xff")
        key = (counter.encoding, h.digest())
        got: tuple[bytes, int] | None = self.cache.get(key)
        if got is None:
            got = (digest(m), counter.message(m))
            self.cache.put(key, got, 64)
        return got


def signature(messages: Iterable[Any], tools: list[Any] | None, counter: TokenCounter,
              memo: dict[int, tuple[bytes, int]] | None = None,
              cache: SegmentCache | None = None) -> Signature:
    """The signature of a request. ``memo`` (keyed by ``id``) shares the work between
    lists that hold the same message dicts, e.g. a request and its rewrite; ``cache``
    shares it between requests."""
    memo = {} if memo is None else memo
    running = hashlib.blake2b(digest_size=16)
    if tools:  # the same list for a request and its rewrite: dumped, hashed, counted once
        got_tools = memo.get(id(tools))
        if got_tools is None:
            got_tools = memo[id(tools)] = (digest(tools), counter.tools(tools))
        first, total = got_tools
    else:
        first, total = digest([]), 0
    running.update(first)
    digests, chain = [first], [running.digest()]
    ends = [total]
    marks = [0] if tools and any(has_mark(t) for t in tools) else []
    for i, m in enumerate(messages, start=1):
        got = memo.get(id(m))
        if got is None:
            if not isinstance(m, dict):
                got = (digest(m), 0)
            elif cache is not None:
                got = cache.get(m, counter)
            else:
                got = (digest(m), counter.message(m))
            memo[id(m)] = got
        running.update(got[0])
        digests.append(got[0])
        chain.append(running.digest())
        total += got[1]
        ends.append(total)
        if has_mark(m):
            marks.append(i)
    return Signature(tuple(digests), tuple(chain), tuple(ends), tuple(marks))


def shared_segments(prev: Signature, cur: Signature) -> int:
    """How many leading segments the two requests share (binary search on the chain)."""
    lo, hi = 0, min(len(prev.chain), len(cur.chain))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if prev.chain[mid - 1] == cur.chain[mid - 1]:
            lo = mid
        else:
            hi = mid - 1
    return lo
