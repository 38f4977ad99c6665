"""The scope index of a Redis store, in Redis itself, so every replica shares one account.

Under the store's prefix (``ce:``): per scope a sorted set of its keys by last use
(``~lru:<scope>``), a hash of their sizes (``~size:<scope>``) and a byte total
(``~bytes:<scope>``); per key its writer (``~who:<key>``: its scope and session, expiring
with the key; for moving a rewritten key and for purge); per session the keys it wrote (``~sess:<session>``). Each of these expires with the store's TTL
after its last write. Keys that Redis expires on their own stay counted until the scope's
eviction reaches them (deleting a missing key is a no-op): the account can only
over-count, and only evicts its own scope's keys. Several replicas writing one scope at
once may each evict a little: the bound holds, the account is not transactional.
"""

from __future__ import annotations

import json
from typing import Any

from context_engine.proxy.store.scopes import Writer
from context_engine.proxy.store.stores import StoreUnavailable


class RedisIndex:
    """See ``scopes.ScopeIndex``; Redis errors become ``StoreUnavailable``."""

    def __init__(self, store: Any) -> None:
        self._client, self._p = store._client, store._prefix + "~"
        self._ttl: int | None = store._ttl
        self.errors: tuple[type[BaseException], ...] = store.errors

    def _run(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except self.errors as exc:
            raise StoreUnavailable(f"store index unavailable: {exc!r}") from exc

    def add(self, key: str, writer: Writer, size: int, now: float, expires: float) -> None:
        self._run(self._remove, [key])
        self._run(self._add, key, writer, size, now)

    def _add(self, key: str, writer: Writer, size: int, now: float) -> None:
        p, s = self._p, writer.scope
        pipe = self._client.pipeline(transaction=True)
        pipe.set(p + "who:" + key, json.dumps([s, writer.session]), ex=self._ttl)
        pipe.zadd(p + "lru:" + s, {key: now})
        pipe.hset(p + "size:" + s, key, size)
        pipe.incrby(p + "bytes:" + s, size)
        names = [p + "lru:" + s, p + "size:" + s, p + "bytes:" + s]
        if writer.session:
            pipe.sadd(p + "sess:" + writer.session, key)
            names.append(p + "sess:" + writer.session)
        if self._ttl:
            for name in names:
                pipe.expire(name, self._ttl)
        pipe.execute()

    def touch(self, keys: list[str], now: float, expires: float) -> None:
        self._run(self._touch, keys, now)

    def _touch(self, keys: list[str], now: float) -> None:
        owners = self._client.mget([self._p + "who:" + k for k in keys])
        pipe = self._client.pipeline(transaction=False)
        for key, owner in zip(keys, owners):
            if owner is not None:
                pipe.zadd(self._p + "lru:" + json.loads(owner)[0], {key: now}, xx=True)
        pipe.execute()

    def remove(self, keys: list[str]) -> None:
        if keys:
            self._run(self._remove, keys)

    def _remove(self, keys: list[str]) -> None:
        p = self._p
        owners = self._client.mget([p + "who:" + k for k in keys])
        for key, owner in zip(keys, owners):
            if owner is None:
                continue
            scope, session = json.loads(owner)
            size = int(self._client.hget(p + "size:" + scope, key) or 0)
            pipe = self._client.pipeline(transaction=True)
            pipe.delete(p + "who:" + key)
            pipe.zrem(p + "lru:" + scope, key)
            pipe.hdel(p + "size:" + scope, key)
            pipe.decrby(p + "bytes:" + scope, size)
            if session:
                pipe.srem(p + "sess:" + session, key)
            pipe.execute()

    def scope_bytes(self, scope: str, now: float) -> int:
        return int(self._run(self._client.get, self._p + "bytes:" + scope) or 0)

    def oldest(self, scope: str, limit: int) -> list[tuple[str, int]]:
        keys = [k.decode() for k in self._run(self._client.zrange, self._p + "lru:" + scope, 0, limit - 1)]
        if not keys:
            return []
        sizes = self._run(self._client.hmget, self._p + "size:" + scope, keys)
        return [(k, int(s or 0)) for k, s in zip(keys, sizes)]

    def keys_of(self, scope: str | None = None, session: str | None = None) -> list[str]:
        if session is not None:
            found = {k.decode() for k in self._run(self._client.smembers, self._p + "sess:" + session)}
            if scope is not None:
                found = {k for k in found if self._owner(k)[0] == scope}
            return sorted(found)
        if scope is not None:
            return [k.decode() for k in self._run(self._client.zrange, self._p + "lru:" + scope, 0, -1)]
        prefix = self._p + "who:"
        return [k.decode()[len(prefix):] for k in self._run(lambda: list(self._client.scan_iter(match=prefix + "*")))]

    def _owner(self, key: str) -> tuple[str, str]:
        raw = self._run(self._client.get, self._p + "who:" + key)
        if not raw:
            return "", ""
        scope, session = json.loads(raw)
        return str(scope), str(session)

    def sessions_of(self, scope: str) -> list[str]:
        keys = self.keys_of(scope=scope)
        owners = self._run(self._client.mget, [self._p + "who:" + k for k in keys]) if keys else []
        return sorted({json.loads(o)[1] for o in owners if o} - {""})

    def drop_scope(self, scope: str) -> None:
        p = self._p
        self._run(self._client.delete, p + "lru:" + scope, p + "size:" + scope, p + "bytes:" + scope)

    def expired(self, now: float) -> list[str]:
        return []  # Redis expires the keys; their index entries go when eviction reaches them
