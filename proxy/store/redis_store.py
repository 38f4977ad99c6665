"""A Redis-backed store so several proxy replicas share summaries, originals and memory.

Every call is bounded: 200 ms to connect and 200 ms per reply by default, no retries
(``open_store`` puts a circuit breaker in front, which decides when to try again). The
URL's own ``socket_timeout`` / ``socket_connect_timeout`` query parameters override them:
``redis://host:6379/0?socket_timeout=0.5``.

Keys expire ``ttl_s`` seconds after they were last written or read (``store_ttl_days``,
default 30 days; 0 = never): a read renews the key (GETEX), so what live sessions use
stays and what nobody asked for in that long leaves.
"""

from __future__ import annotations

TIMEOUT = 0.2  # seconds, to connect and per reply


class RedisStore:
    def __init__(self, url: str, prefix: str = "ce:", timeout: float = TIMEOUT,
                 ttl_s: float = 0.0) -> None:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        self._client = redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout,
                                            retry=Retry(NoBackoff(), 0))
        self._prefix = prefix
        self._ttl = max(1, int(ttl_s)) if ttl_s > 0 else None
        self.errors: tuple[type[BaseException], ...] = (redis.RedisError, OSError)

    def get(self, key: str) -> bytes | None:
        if self._ttl is None:
            value = self._client.get(self._prefix + key)
        else:
            value = self._client.getex(self._prefix + key, ex=self._ttl)
        return value if isinstance(value, bytes) else None

    def set(self, key: str, value: bytes) -> None:
        self._client.set(self._prefix + key, value, ex=self._ttl)

    def delete(self, key: str) -> bool:
        return bool(self._client.delete(self._prefix + key))

    def touch(self, key: str, seconds: float) -> None:
        """Reads renew keys already (GETEX); nothing more to do."""

    def keys_matching(self, pattern: str) -> list[str]:
        """The keys matching a glob ``pattern`` (SCAN: purge only, never on a request)."""
        n = len(self._prefix)
        return [k.decode()[n:] for k in self._client.scan_iter(match=self._prefix + pattern, count=1000)]

    def claim(self, key: str, seconds: float) -> bool:
        """``key`` set for ``seconds`` if absent (SET NX PX); whether this call set it."""
        return bool(self._client.set(self._prefix + key, b"", nx=True, px=max(1, int(seconds * 1000))))

    def close(self) -> None:
        self._client.close()
