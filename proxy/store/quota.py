"""A bound per caller scope in the store: one caller filling its share evicts only its own.

Every store ``open_store`` makes (memory, diskcache, Redis behind its breaker) carries a
``ScopeQuota``. Each write is charged to the writer of the running rewrite
(``proxy/store/scopes.py``: ``writing_as(caller, session)``) in a ``ScopeIndex``: its
size (key + value bytes) and when it was last used. When a scope passes ``scope_bytes``,
its own least recently used keys are deleted until it fits again; other scopes' keys are
never touched. A single value larger than the whole share is not stored (a later recall
answers "not found", as after an eviction). The backend's global bound (diskcache's size
limit, the memory store's byte cap, Redis's maxmemory) stays as a backstop for many full
scopes at once.

Reads are remembered and applied to the index in batches (at the next write, or every
``TOUCH_BATCH`` reads), so a read costs no index write; with a TTL they renew the key's
expiry then. The index is also what ``context-engine purge`` (``proxy/reporting/purge.py``)
reads to find a scope's or a session's keys. Accounting fails open: an index that cannot
be written (Redis down) leaves the value stored and uncounted.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

from context_engine.proxy.store.scopes import ScopeIndex, current_writer

log = logging.getLogger("context_engine.store")
TOUCH_BATCH = 256  # reads remembered before they are written to the index
EVICT_BATCH = 64  # keys fetched from the index per eviction round
EXPIRE_EVERY = 1000  # writes between sweeps of expired keys out of the index


class ScopeQuota:
    """The account of one store. ``store`` arguments are the store it belongs to: its
    ``delete(key)`` and ``touch(key, seconds)`` are used for evictions and renewals."""

    def __init__(self, index: ScopeIndex, scope_bytes: int, ttl_s: float = 0.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.index, self.scope_bytes, self.ttl_s, self.clock = index, scope_bytes, ttl_s, clock
        self.evicted = 0  # keys deleted to keep a scope within its share
        self._touched: dict[str, None] = {}
        self._writes = 0
        self._lock = threading.Lock()

    def too_big(self, key: str, value: bytes) -> bool:
        return bool(self.scope_bytes) and _size(key, value) > self.scope_bytes

    def read(self, store: Any, key: str) -> None:
        with self._lock:
            self._touched[key] = None
            full = len(self._touched) >= TOUCH_BATCH
        if full:
            self._guarded(self._flush, store)

    def wrote(self, store: Any, key: str, value: bytes) -> None:
        self._guarded(self._wrote, store, key, _size(key, value))

    def _wrote(self, store: Any, key: str, size: int) -> None:
        writer, now = current_writer(), self.clock()
        self.index.add(key, writer, size, now, now + self.ttl_s if self.ttl_s > 0 else 0.0)
        self._flush(store)
        if self.scope_bytes:
            self._fit(store, writer.scope, key, now)
        self._writes += 1
        if self._writes % EXPIRE_EVERY == 0:
            self.index.remove(self.index.expired(now))

    def forget(self, keys: list[str]) -> None:
        """``keys`` left the store on its own (its global bound, expiry)."""
        if keys:
            self._guarded(self.index.remove, keys)

    def delete_keys(self, store: Any, keys: list[str]) -> int:
        """Delete ``keys`` from ``store`` and the index; how many the store held."""
        gone = sum(bool(store.delete(key)) for key in keys)
        self.index.remove(keys)
        return gone

    def close(self) -> None:
        close = getattr(self.index, "close", None)
        if callable(close):
            close()

    def _fit(self, store: Any, scope: str, written: str, now: float) -> None:
        """Delete ``scope``'s least recently used keys (never ``written``) until it fits."""
        while (used := self.index.scope_bytes(scope, now)) > self.scope_bytes:
            over, chosen = used - self.scope_bytes, []
            for key, size in self.index.oldest(scope, EVICT_BATCH + 1):
                if key == written:
                    continue
                chosen.append(key)
                over -= size
                if over <= 0:
                    break
            if not chosen:
                return
            self.evicted += len(chosen)
            self.delete_keys(store, chosen)

    def _flush(self, store: Any) -> None:
        with self._lock:
            keys, self._touched = list(self._touched), {}
        if not keys:
            return
        now = self.clock()
        self.index.touch(keys, now, now + self.ttl_s if self.ttl_s > 0 else 0.0)
        if self.ttl_s > 0:  # a read renews the key's expiry
            for key in keys:
                store.touch(key, self.ttl_s)

    def _guarded(self, fn: Callable[..., None], *args: Any) -> None:
        from context_engine.proxy.store.stores import StoreUnavailable

        try:
            fn(*args)
        except (StoreUnavailable, OSError, sqlite3.Error) as exc:  # accounting fails open
            log.warning("store: scope accounting failed: %r", exc)


def _size(key: str, value: bytes) -> int:
    return len(key.encode("utf-8", "surrogatepass")) + len(value)
