"""Provider prompt-cache models: the input tokens of a request a provider bills as cache
reads and cache writes, given what the same caller sent before.

- ``openai`` (automatic): the longest prefix shared with an earlier request, from
  1,024 tokens on, in 128-token steps, is read at the cached rate; writes are free.
- ``anthropic`` (explicit): only prefixes ending at a ``cache_control`` breakpoint are
  written (at the write price, 1.25x input for the 5-minute cache). At each breakpoint
  the provider looks for an earlier written prefix at that block or up to 20 blocks
  before it; the longest hit is read (0.1x input) and everything after it up to the last
  breakpoint is written. Prefixes under 1,024 tokens (2,048 for Haiku) are not cached;
  more than 4 breakpoints is a 400 from the provider (nothing cached).

Both work on ``context_engine.proxy.engine.prefix.Signature``s, at message granularity (a breakpoint on a
part counts at the end of its message). The proxy uses them for the counterfactual bill
of the client's original requests (``proxy/billing/estimate.py``) and the bench prices its
replays with them; a later Anthropic Messages adapter reuses them unchanged.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from context_engine.proxy.engine.prefix import MAX_BREAKPOINTS, Signature

OPENAI_MIN, OPENAI_STEP = 1024, 128
ANTHROPIC_MIN, ANTHROPIC_MIN_HAIKU = 1024, 2048
LOOKBACK = 20
TTL = {"openai": 600.0, "anthropic": 300.0}  # seconds an unused entry lives
MODELS = ("openai", "anthropic")


@dataclass(frozen=True)
class CacheUse:
    read: int = 0
    write: int = 0


class PrefixCache:
    """One caller's cache entries: chained digest → tokens, with their last use.

    Bounded: past ``max_entries`` the least recently used entries go."""

    def __init__(self, ttl: float, max_entries: int = 8192) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self.entries: OrderedDict[bytes, tuple[int, float]] = OrderedDict()

    def hit(self, key: bytes, now: float) -> int | None:
        got = self.entries.get(key)
        if got is None:
            return None
        if now - got[1] > self.ttl:
            del self.entries[key]
            return None
        self.entries[key] = (got[0], now)
        self.entries.move_to_end(key)
        return got[0]

    def put(self, key: bytes, tokens: int, now: float) -> None:
        self.entries[key] = (tokens, now)
        self.entries.move_to_end(key)
        while len(self.entries) > self.max_entries:
            self.entries.popitem(last=False)


def openai_use(sig: Signature, cache: PrefixCache, now: float) -> CacheUse:
    best = 0
    for i in range(len(sig.chain) - 1, -1, -1):  # the first hit from the end is the longest
        got = cache.hit(sig.chain[i], now)
        if got is not None:
            best = got
            break
    for key, tokens in zip(sig.chain, sig.ends):
        cache.put(key, tokens, now)
    read = 0 if best < OPENAI_MIN else best // OPENAI_STEP * OPENAI_STEP
    return CacheUse(min(read, sig.tokens), 0)


def anthropic_min(model: str) -> int:
    return ANTHROPIC_MIN_HAIKU if "haiku" in model.lower() else ANTHROPIC_MIN


def anthropic_use(sig: Signature, cache: PrefixCache, now: float, model: str = "") -> CacheUse:
    marks = sig.breakpoints
    if not marks or len(marks) > MAX_BREAKPOINTS:
        return CacheUse()
    least = anthropic_min(model)
    read = 0
    for b in marks:
        for j in range(b, max(-1, b - LOOKBACK - 1), -1):
            got = cache.hit(sig.chain[j], now)
            if got is not None:
                read = max(read, got)
                break
    end = sig.ends[marks[-1]]
    write = end - read if end >= least and end > read else 0
    for b in marks:
        if sig.ends[b] >= least:
            cache.put(sig.chain[b], sig.ends[b], now)
    return CacheUse(read, write)


def use(model_kind: str, sig: Signature, cache: PrefixCache, now: float, model: str = "") -> CacheUse:
    if model_kind == "anthropic":
        return anthropic_use(sig, cache, now, model)
    return openai_use(sig, cache, now)
