"""A Redis-backed store so several proxy replicas share summaries, originals and memory."""

from __future__ import annotations


class RedisStore:
    def __init__(self, url: str, prefix: str = "ce:") -> None:
        import redis

        self._client = redis.Redis.from_url(url)
        self._prefix = prefix

    def get(self, key: str) -> bytes | None:
        value = self._client.get(self._prefix + key)
        return value if isinstance(value, bytes) else None

    def set(self, key: str, value: bytes) -> None:
        self._client.set(self._prefix + key, value)
