"""Key-value stores for things rules keep across requests (tool originals, summaries).

``DiskStore`` (diskcache) is the embedded default; ``MemoryStore`` serves tests and the
bench, and keeps at most ``MEMORY_STORE_BYTES`` in the process (least recently used values
leave first: a recall of one answers "not found", as after a Redis key expires); Redis (shared by replicas) comes behind a circuit breaker (``store_breaker``): in
an outage its calls raise ``StoreUnavailable`` at once and the rules using it fail open.
Values are bytes; keys are short strings.

Every store forgets a key ``ttl_s`` seconds after it was last written (and, through
its ``quota``, read): ``store_ttl_days``. ``open_store`` gives each store a ``quota``
(``proxy/store/quota.py``) that bounds what each caller scope occupies.
A disk store's folder is 0700 and every file in it 0600 (``proxy/store/files.py``): it
holds tool results in plain text.
"""

from __future__ import annotations

import fnmatch
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Protocol

from context_engine.proxy.store.files import FILE_MODE, private_dir, private_file, private_tree

if TYPE_CHECKING:
    from context_engine.proxy.store.quota import ScopeQuota

MEMORY_STORE_BYTES = 128 * 1024 * 1024


class StoreUnavailable(ConnectionError):
    """The store did not answer (or its circuit is open); the calling rule fails open."""


class Store(Protocol):
    def get(self, key: str) -> bytes | None: ...

    def set(self, key: str, value: bytes) -> None: ...

    # Optional: ``claim(key, seconds) -> bool`` sets ``key`` only if it is absent, for
    # ``seconds``, and says whether it did (one embedder per text: rules/retrieve/embedding_cache.py).


class MemoryStore:
    def __init__(self, max_bytes: int = MEMORY_STORE_BYTES, ttl_s: float = 0.0,
                 clock: Any = time.monotonic, quota: ScopeQuota | None = None) -> None:
        self.quota = quota
        self._data: dict[str, bytes] = {}  # least recently used first
        self._bytes = 0  # of the keys and values in ``_data``
        self.max_bytes = max_bytes
        self.ttl_s, self._clock = ttl_s, clock
        self._expires: dict[str, float] = {}  # key → when it expires (with a TTL)
        self._claims: dict[str, float] = {}
        self._lock = threading.Lock()

    @property
    def held_bytes(self) -> int:
        return self._bytes

    def get(self, key: str) -> bytes | None:
        with self._lock:
            value = self._data.pop(key, None)
            if value is not None and self._expires.get(key, float("inf")) <= self._clock():
                self._forget(key, value)
                return None
            if value is not None:
                self._data[key] = value  # now the most recent
        if value is not None and self.quota is not None:
            self.quota.read(self, key)
        return value

    def set(self, key: str, value: bytes) -> None:
        if self.quota is not None and self.quota.too_big(key, value):
            return
        stored, dropped = self._set(key, value)
        if self.quota is not None:
            self.quota.forget(dropped)  # the store's own bound or expiry took them
            if stored:
                self.quota.wrote(self, key, value)

    def _set(self, key: str, value: bytes) -> tuple[bool, list[str]]:
        """Whether ``value`` was kept, and the keys that left to make room or expired."""
        dropped: list[str] = []
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self._forget(key, old)
            if len(key) + len(value) > self.max_bytes:
                return False, dropped
            self._data[key] = value
            self._bytes += len(key) + len(value)
            if self.ttl_s > 0:
                self._expires[key] = self._clock() + self.ttl_s
                if len(self._expires) % 1024 == 0:
                    dropped += self._cull()
            while self._bytes > self.max_bytes and self._data:
                k = next(iter(self._data))
                self._forget(k, self._data.pop(k))
                dropped.append(k)
        return True, dropped

    def delete(self, key: str) -> bool:
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self._forget(key, old)
            return old is not None

    def touch(self, key: str, seconds: float) -> None:
        with self._lock:
            if key in self._data:
                self._expires[key] = self._clock() + seconds

    def keys_matching(self, pattern: str) -> list[str]:
        with self._lock:
            return [k for k in self._data if fnmatch.fnmatchcase(k, pattern)]

    def _forget(self, key: str, value: bytes) -> None:
        """``key`` (already out of ``_data``) leaves the account (under the lock)."""
        self._bytes = self._bytes - len(key) - len(value) if self._data else 0
        self._expires.pop(key, None)

    def _cull(self) -> list[str]:
        """Every expired key leaves (under the lock); which."""
        now = self._clock()
        gone = [k for k, t in self._expires.items() if t <= now]
        for key in gone:
            self._forget(key, self._data.pop(key))
        return gone

    def claim(self, key: str, seconds: float) -> bool:
        now = time.monotonic()
        with self._lock:
            if self._claims.get(key, 0.0) > now:
                return False
            if len(self._claims) > 10_000:  # expired claims go; live ones stay
                self._claims = {k: t for k, t in self._claims.items() if t > now}
            self._claims[key] = now + seconds
            return True


def store_folder(path: str) -> bool:
    """Whether ``path`` is a store's own folder (new, empty, or a diskcache's): only then
    are it and its files tightened; a folder of the user's given as ``store`` is not."""
    try:
        names = os.listdir(path)
    except FileNotFoundError:
        return True
    return not names or "cache.db" in names


def _private_disk() -> Any:
    """A diskcache ``Disk`` whose value files (values of 32 KB and more) are 0600."""
    import diskcache

    class PrivateDisk(diskcache.Disk):  # type: ignore[misc]
        def store(self, value: Any, read: bool, key: Any = diskcache.core.UNKNOWN) -> Any:
            size, mode, filename, db_value = super().store(value, read, key)
            if filename:
                full = os.path.join(self._directory, filename)
                os.chmod(full, FILE_MODE)
                for folder in (os.path.dirname(full), os.path.dirname(os.path.dirname(full))):
                    os.chmod(folder, 0o700)
            return size, mode, filename, db_value

    return PrivateDisk


class DiskStore:
    """A diskcache folder: 0700, its files 0600 (made so, or tightened when found looser);
    keys expire ``ttl_s`` seconds after their last write (0 = never), and diskcache culls
    expired keys as it writes (and all of them when the store opens)."""

    def __init__(self, path: str, ttl_s: float = 0.0, quota: ScopeQuota | None = None) -> None:
        import diskcache

        self.quota = quota
        ours = store_folder(path)
        private_dir(path, tighten=ours)
        private_file(os.path.join(path, "cache.db"))  # SQLite gives -wal/-shm its mode
        self._cache = diskcache.Cache(path, disk=_private_disk())
        if ours:
            private_tree(path)
        self.ttl_s = ttl_s
        self._cache.expire()

    def get(self, key: str) -> bytes | None:
        value = self._cache.get(key)
        if not isinstance(value, bytes):
            return None
        if self.quota is not None:
            self.quota.read(self, key)
        return value

    def set(self, key: str, value: bytes) -> None:
        if self.quota is not None and self.quota.too_big(key, value):
            return
        self._cache.set(key, value, expire=self.ttl_s if self.ttl_s > 0 else None)
        if self.quota is not None:
            self.quota.wrote(self, key, value)

    def delete(self, key: str) -> bool:
        return bool(self._cache.delete(key))

    def touch(self, key: str, seconds: float) -> None:
        self._cache.touch(key, expire=seconds)

    def keys_matching(self, pattern: str) -> list[str]:
        """The keys matching a glob ``pattern`` (a scan: purge only, never on a request)."""
        return [k for k in self._cache.iterkeys() if isinstance(k, str) and fnmatch.fnmatchcase(k, pattern)]

    def claim(self, key: str, seconds: float) -> bool:
        return bool(self._cache.add(key, b"", expire=seconds))

    def close(self) -> None:
        self._cache.close()
        if self.quota is not None:
            self.quota.close()


DEFAULT_SCOPE_BYTES = 64 * 1024 * 1024


def open_store(url: str, ttl_s: float = 0.0, scope_bytes: int = DEFAULT_SCOPE_BYTES) -> Store:
    """``memory://``, a directory path (diskcache), or ``redis://host:port/db``, whose keys
    expire ``ttl_s`` seconds after their last write or read (0 = never), each caller
    scope bounded to ``scope_bytes`` (0 = no bound; in a memory store a scope gets at
    most a quarter of it)."""
    from context_engine.proxy.store.quota import ScopeQuota
    from context_engine.proxy.store.scopes import MemoryIndex

    if url.startswith("memory://"):
        share = min(scope_bytes, MEMORY_STORE_BYTES // 4) if scope_bytes else 0
        return MemoryStore(ttl_s=ttl_s, quota=ScopeQuota(MemoryIndex(), share, ttl_s))
    if url.startswith(("redis://", "rediss://")):
        from context_engine.proxy.store.breaker import GuardedStore
        from context_engine.proxy.store.redis_store import RedisStore
        from context_engine.proxy.store.scope_index_redis import RedisIndex

        redis = RedisStore(url, ttl_s=ttl_s)
        return GuardedStore(redis, quota=ScopeQuota(RedisIndex(redis), scope_bytes, ttl_s))
    from context_engine.proxy.store.scope_index_sqlite import SqliteIndex

    private_dir(url, tighten=store_folder(url))
    return DiskStore(url, ttl_s, ScopeQuota(SqliteIndex(url), scope_bytes, ttl_s))
