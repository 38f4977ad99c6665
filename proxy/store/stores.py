"""Key-value stores for things rules keep across requests (tool originals, summaries).

``DiskStore`` (diskcache) is the embedded default; ``MemoryStore`` serves tests and the
bench, and keeps at most ``MEMORY_STORE_BYTES`` in the process (least recently used values
leave first: a recall of one answers "not found", as after a Redis key expires); Redis (shared by replicas) comes behind a circuit breaker (``store_breaker``): in
an outage its calls raise ``StoreUnavailable`` at once and the rules using it fail open.
Values are bytes; keys are short strings.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

MEMORY_STORE_BYTES = 128 * 1024 * 1024


class StoreUnavailable(ConnectionError):
    """The store did not answer (or its circuit is open); the calling rule fails open."""


class Store(Protocol):
    def get(self, key: str) -> bytes | None: ...

    def set(self, key: str, value: bytes) -> None: ...

    # Optional: ``claim(key, seconds) -> bool`` sets ``key`` only if it is absent, for
    # ``seconds``, and says whether it did (one embedder per text: rules/retrieve/embedding_cache.py).


class MemoryStore:
    def __init__(self, max_bytes: int = MEMORY_STORE_BYTES) -> None:
        self._data: dict[str, bytes] = {}  # least recently used first
        self._bytes = 0  # of the keys and values in ``_data``
        self.max_bytes = max_bytes
        self._claims: dict[str, float] = {}
        self._lock = threading.Lock()

    @property
    def held_bytes(self) -> int:
        return self._bytes

    def get(self, key: str) -> bytes | None:
        with self._lock:
            value = self._data.pop(key, None)
            if value is not None:
                self._data[key] = value  # now the most recent
            return value

    def set(self, key: str, value: bytes) -> None:
        with self._lock:
            old = self._data.pop(key, None)
            if not self._data:
                self._bytes = 0
            elif old is not None:
                self._bytes -= len(key) + len(old)
            if len(key) + len(value) > self.max_bytes:
                return
            self._data[key] = value
            self._bytes += len(key) + len(value)
            while self._bytes > self.max_bytes and self._data:
                k = next(iter(self._data))
                self._bytes -= len(k) + len(self._data.pop(k))

    def claim(self, key: str, seconds: float) -> bool:
        now = time.monotonic()
        with self._lock:
            if self._claims.get(key, 0.0) > now:
                return False
            if len(self._claims) > 10_000:  # expired claims go; live ones stay
                self._claims = {k: t for k, t in self._claims.items() if t > now}
            self._claims[key] = now + seconds
            return True


class DiskStore:
    def __init__(self, path: str) -> None:
        import diskcache

        self._cache = diskcache.Cache(path)

    def get(self, key: str) -> bytes | None:
        value = self._cache.get(key)
        return value if isinstance(value, bytes) else None

    def set(self, key: str, value: bytes) -> None:
        self._cache.set(key, value)

    def claim(self, key: str, seconds: float) -> bool:
        return bool(self._cache.add(key, b"", expire=seconds))

    def close(self) -> None:
        self._cache.close()


def open_store(url: str, ttl_s: float = 0.0) -> Store:
    """``memory://``, a directory path (diskcache), or ``redis://host:port/db`` (whose
    keys expire ``ttl_s`` seconds after their last write or read; 0 = never)."""
    if url.startswith("memory://"):
        return MemoryStore()
    if url.startswith(("redis://", "rediss://")):
        from context_engine.proxy.store.breaker import GuardedStore
        from context_engine.proxy.store.redis_store import RedisStore

        return GuardedStore(RedisStore(url, ttl_s=ttl_s))
    return DiskStore(url)
