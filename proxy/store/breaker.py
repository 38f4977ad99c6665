"""A circuit breaker in front of a remote store (Redis), so an outage costs one timeout,
not one per store call of every request.

- closed: calls go through. ``failures`` consecutive errors open the circuit.
- open: calls fail at once with ``StoreUnavailable`` (the rule that made them fails open:
  the pipeline skips it and the request goes out) until ``cooldown`` seconds have passed.
- half-open: one call is let through; success closes the circuit, an error reopens it.

A write that fails is kept in a bounded in-memory map and served to later reads, so work
the caller just did (an embedding) is neither redone nor re-sent on every later request;
once the store answers again these writes go out, a few per successful call.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from context_engine.proxy.store.memo import BoundedCache
from context_engine.proxy.store.quota import ScopeQuota
from context_engine.proxy.store.stores import Store, StoreUnavailable

log = logging.getLogger("context_engine.store")
T = TypeVar("T")
WRITE_BACK = 20  # held writes retried after each successful call


class GuardedStore:
    def __init__(self, inner: Store, failures: int = 2, cooldown: float = 2.0,
                 held_entries: int = 10_000, held_bytes: int = 64 * 1024 * 1024,
                 clock: Callable[[], float] = time.monotonic, quota: ScopeQuota | None = None) -> None:
        self.inner, self.quota = inner, quota
        self.failures, self.cooldown, self.clock = failures, cooldown, clock
        self.errors: tuple[type[BaseException], ...] = getattr(inner, "errors", (OSError,))
        self.held: BoundedCache[str, bytes] = BoundedCache(held_entries, held_bytes)
        self.state = "closed"
        self.last_error = ""
        self.failed_calls = self.rejected_calls = 0
        self._streak = 0
        self._opened_at = 0.0
        self._trial = False
        self._lock = threading.Lock()

    def get(self, key: str) -> bytes | None:
        held = self.held.get(key)
        if held is not None:
            return held  # type: ignore[no-any-return]
        value = self._call(self.inner.get, key)
        if value is not None and self.quota is not None:
            self.quota.read(self, key)
        return value

    def set(self, key: str, value: bytes) -> None:
        if self.quota is not None and self.quota.too_big(key, value):
            return
        try:
            self._call(self.inner.set, key, value)
        except StoreUnavailable:
            self.held.put(key, value)
            raise
        self.held.pop(key)
        if self.quota is not None:
            self.quota.wrote(self, key, value)

    def delete(self, key: str) -> bool:
        self.held.pop(key)
        return bool(self._call(self.inner.delete, key))  # type: ignore[attr-defined]

    def touch(self, key: str, seconds: float) -> None:
        """Redis renews a key on read already (GETEX)."""

    def keys_matching(self, pattern: str) -> list[str]:
        return list(self._call(self.inner.keys_matching, pattern))  # type: ignore[attr-defined]

    def claim(self, key: str, seconds: float) -> bool:
        """Advisory (one embedder per text): with the store failing or its circuit open
        the caller goes ahead (True), and the failure is not counted against the store."""
        claim = getattr(self.inner, "claim", None)
        if claim is None or self.state != "closed":
            return True
        try:
            return bool(claim(key, seconds))
        except self.errors:
            return True

    def health(self) -> dict[str, Any]:
        with self._lock:
            state = "ok" if self.state == "closed" else "down" if self.state == "open" else "recovering"
            return {"state": state, "kind": type(self.inner).__name__, "circuit": self.state,
                    "failed_calls": self.failed_calls, "rejected_calls": self.rejected_calls,
                    "held_writes": len(self.held), "last_error": self.last_error}

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if callable(close):
            close()
        if self.quota is not None:
            self.quota.close()

    def _allow(self) -> bool:
        with self._lock:
            if self.state == "closed":
                return True
            if self.state == "open" and self.clock() - self._opened_at >= self.cooldown:
                self.state = "half-open"
            if self.state == "half-open" and not self._trial:
                self._trial = True
                return True
            self.rejected_calls += 1
            return False

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        if not self._allow():
            raise StoreUnavailable(f"store unavailable (circuit open): {self.last_error}")
        try:
            result = fn(*args)
        except self.errors as exc:
            self._failed(exc)
            raise StoreUnavailable(f"store unavailable: {exc!r}") from exc
        except BaseException:  # not an outage (a bad value, say): a trial call ends all the same
            with self._lock:
                self._trial = False
            raise
        self._succeeded()
        return result

    def _failed(self, exc: BaseException) -> None:
        with self._lock:
            self.failed_calls += 1
            self._streak += 1
            self.last_error = repr(exc)[:300]
            self._trial = False
            if self.state == "half-open" or self._streak >= self.failures:
                if self.state != "open":
                    log.warning("store circuit open for %.1f s: %r", self.cooldown, exc)
                self.state, self._opened_at = "open", self.clock()

    def _succeeded(self) -> None:
        with self._lock:
            recovered = self.state != "closed"
            self.state, self._streak, self._trial = "closed", 0, False
        if recovered:
            log.info("store answers again; circuit closed")
        for key in self.held.keys()[:WRITE_BACK]:
            value = self.held.get(key)
            if value is None:
                continue
            try:
                self.inner.set(key, value)
            except self.errors as exc:
                self._failed(exc)
                return
            self.held.pop(key)
