"""Bounded memory for things remembered by content: an LRU map with an entry cap AND a
byte cap, and ``memoize``, a decorator for pure functions of one string.

Clients resend their whole history, so memoising per-message work pays; but a key is a
whole message, and a few multi-megabyte tool outputs would make an entry-capped cache
hold gigabytes. Here each entry is charged its size and the least recently used entries
leave once either cap is passed; a single value larger than the byte cap is not kept.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
SHORT = 256  # characters: shorter keys go to a C lru_cache (fast; bytes bounded by its size)
ENTRY_OVERHEAD = 100  # bytes charged per entry on top of its key and value (dict slot, node)


def size_of(value: Any) -> int:
    """Bytes a key or value holds: exact for str/bytes, ``sys.getsizeof`` otherwise."""
    if isinstance(value, (str, bytes)):
        return len(value) + 50
    if isinstance(value, (tuple, frozenset, list)) and value and isinstance(next(iter(value)), str):
        return sys.getsizeof(value) + sum(len(v) + 50 for v in value)
    return sys.getsizeof(value)


class BoundedCache(Generic[K, V]):
    """LRU map bounded by ``max_entries`` and ``max_bytes``; safe to share between threads."""

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._data: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._lock = threading.Lock()
        self.bytes = 0
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: K, default: Any = None) -> Any:
        with self._lock:
            found = self._data.get(key)
            if found is None:
                return default
            self._data.move_to_end(key)
            return found[0]

    def put(self, key: K, value: V, cost: int | None = None) -> None:
        """Keep ``value``, charged ``cost`` bytes (default: its measured size)."""
        cost = size_of(key) + (size_of(value) if cost is None else cost) + ENTRY_OVERHEAD
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self.bytes -= old[1]
            if cost > self.max_bytes:
                return
            self._data[key] = (value, cost)
            self.bytes += cost
            while len(self._data) > self.max_entries or self.bytes > self.max_bytes:
                _, (_, dropped) = self._data.popitem(last=False)
                self.bytes -= dropped
                self.evicted += 1

    def pop(self, key: K) -> Any:
        with self._lock:
            found = self._data.pop(key, None)
            if found is None:
                return None
            self.bytes -= found[1]
            return found[0]

    def keys(self) -> list[K]:
        with self._lock:
            return list(self._data)


def memoize(max_entries: int, max_bytes: int, short: int = SHORT
            ) -> Callable[[Callable[[str], V]], Callable[[str], V]]:
    """Memoise a pure function of one string within caps: texts up to ``short`` characters
    in a C ``lru_cache`` of ``max_entries`` (bytes bounded by entries x ``short``), longer
    ones in a ``BoundedCache`` of ``max_entries`` and ``max_bytes`` (``fn.cache``)."""

    def wrap(fn: Callable[[str], V]) -> Callable[[str], V]:
        fast = functools.lru_cache(maxsize=max_entries)(fn)
        cache: BoundedCache[str, Any] = BoundedCache(max_entries, max_bytes)

        @functools.wraps(fn)
        def cached(text: str) -> V:
            if len(text) <= short:
                return fast(text)
            found = cache.get(text)
            if found is None:
                found = fn(text)
                cache.put(text, found)
            return found  # type: ignore[no-any-return]

        cached.cache = cache  # type: ignore[attr-defined]
        cached.fast = fast  # type: ignore[attr-defined]
        return cached

    return wrap
