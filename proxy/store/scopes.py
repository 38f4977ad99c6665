"""Who wrote each store key: the caller scope and session a write is charged to.

A rewrite runs its rules with ``writing_as(caller, session_id)`` (``Engine.rewrite``);
every store write inside it, by any rule, is charged to that caller scope
(``session.caller_hash``) and session. Rules keep calling ``store.get/set`` as before:
the writer travels in a ``ContextVar`` (a task's context, copied into the tasks it
gathers), not through every rule's signature. A write outside a rewrite (background
prefetch: embeddings, which are content-addressed and shared) is charged to the shared
scope ``""``.

The index of who wrote what (``ScopeIndex``) is what lets ``QuotaStore``
(``proxy/store/quota.py``) bound each scope and ``context-engine purge`` find a
session's or a scope's keys. ``MemoryIndex`` lives in the process (memory://);
``proxy/store/scope_index_sqlite.py`` keeps it beside a diskcache store;
``proxy/store/scope_index_redis.py`` keeps it in Redis.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Writer:
    scope: str = ""  # the caller scope (64 hex digits), "" = shared
    session: str = ""


# The writer of the rewrite running in this task (a ContextVar, not mutable module state:
# each task sees its own value).
WRITER: ContextVar[Writer | None] = ContextVar("context_engine_store_writer", default=None)
SHARED = Writer()


@contextlib.contextmanager
def writing_as(scope: str, session: str = "") -> Iterator[Writer]:
    """Charge the store writes made inside the block to ``scope`` and ``session``."""
    writer = Writer(scope, session)
    token = WRITER.set(writer)
    try:
        yield writer
    finally:
        WRITER.reset(token)


def current_writer() -> Writer:
    return WRITER.get() or SHARED


class ScopeIndex(Protocol):
    """Which scope and session wrote each key, its size, and when it was last used."""

    def add(self, key: str, writer: Writer, size: int, now: float, expires: float) -> None: ...

    def touch(self, keys: list[str], now: float, expires: float) -> None:
        """``keys`` were read at ``now``: most recently used, expiring at ``expires``."""

    def remove(self, keys: list[str]) -> None: ...

    def scope_bytes(self, scope: str, now: float) -> int: ...

    def oldest(self, scope: str, limit: int) -> list[tuple[str, int]]:
        """The scope's least recently used keys with their sizes, oldest first."""

    def keys_of(self, scope: str | None = None, session: str | None = None) -> list[str]: ...

    def sessions_of(self, scope: str) -> list[str]: ...

    def expired(self, now: float) -> list[str]: ...

    def drop_scope(self, scope: str) -> None:
        """Forget ``scope``'s account itself (purge), once its keys are deleted."""


@dataclass
class _Entry:
    scope: str
    session: str
    size: int
    expires: float  # 0 = never


class MemoryIndex:
    """The index in this process: per scope, its keys least recently used first."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self._lru: dict[str, OrderedDict[str, None]] = {}
        self._bytes: dict[str, int] = {}
        self._lock = threading.Lock()

    def add(self, key: str, writer: Writer, size: int, now: float, expires: float) -> None:
        with self._lock:
            self._drop(key)
            self._entries[key] = _Entry(writer.scope, writer.session, size, expires)
            self._lru.setdefault(writer.scope, OrderedDict())[key] = None
            self._bytes[writer.scope] = self._bytes.get(writer.scope, 0) + size

    def touch(self, keys: list[str], now: float, expires: float) -> None:
        with self._lock:
            for key in keys:
                entry = self._entries.get(key)
                if entry is not None:
                    self._lru[entry.scope].move_to_end(key)
                    entry.expires = expires

    def remove(self, keys: list[str]) -> None:
        with self._lock:
            for key in keys:
                self._drop(key)

    def _drop(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is None:
            return
        lru = self._lru[entry.scope]
        lru.pop(key, None)
        self._bytes[entry.scope] -= entry.size
        if not lru:
            del self._lru[entry.scope], self._bytes[entry.scope]

    def scope_bytes(self, scope: str, now: float) -> int:
        return self._bytes.get(scope, 0)

    def oldest(self, scope: str, limit: int) -> list[tuple[str, int]]:
        with self._lock:
            keys = list(self._lru.get(scope, ()))[:limit]
            return [(k, self._entries[k].size) for k in keys]

    def keys_of(self, scope: str | None = None, session: str | None = None) -> list[str]:
        with self._lock:
            return [k for k, e in self._entries.items()
                    if (scope is None or e.scope == scope) and (session is None or e.session == session)]

    def sessions_of(self, scope: str) -> list[str]:
        with self._lock:
            return sorted({e.session for e in self._entries.values() if e.scope == scope and e.session})

    def expired(self, now: float) -> list[str]:
        with self._lock:
            return [k for k, e in self._entries.items() if 0 < e.expires <= now]

    def drop_scope(self, scope: str) -> None:
        self.remove(self.keys_of(scope=scope))
