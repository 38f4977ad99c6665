"""A request's store writes, held until the upstream has answered it.

The rules write the store as they rewrite (stored originals, summaries, compaction
lines, retrieve's committed zones and embeddings, the recall state). A request the
upstream refuses (a made-up key: 401; or 400, 404, 413, 422, 429, any 4xx) must leave
nothing behind, or ten refused requests cost the store megabytes and a few hundred
evict every tenant's data. So each rewrite writes into its own ``PendingWrites``:
its reads see its own writes first (the rewrite's bytes are exactly what they were
with direct writes: same input and store, same bytes), and nothing reaches the store
until the edge has the upstream's status: ``commit`` for an accepted one, ``drop`` for a
refusal (``refused``).

The rules keep the store they were built with (``RuleDeps.store``): it is a
``RoutedStore``, which sends each call to the ``PendingWrites`` of the rewrite running
in this task (a ``ContextVar``, copied into the tasks a rewrite gathers), and to the
store itself outside a rewrite (background work of requests already committed).

A 5xx, or an upstream the proxy could not reach, is not a refusal: the caller's
credential was not turned down, and a retry would compute the same writes (a
summarizer's LLM calls included), so they are committed. A request cut by shutdown
before its answer is dropped (nothing is known of it).

``claim`` (one embedder per text across threads and replicas) goes to the store at once:
it is an empty lock that expires within seconds, not data, and without it two replicas
would embed the same text. Another claimant of a text a held request embedded waits
for its vector until that request is answered (at most ``CLAIM_WAIT``, 2 s, then embeds
it itself). A refused request's claims are the one trace it leaves, and they expire.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from context_engine.proxy.store.scopes import writing_as
from context_engine.proxy.store.stores import Store, StoreUnavailable


def refused(status: int) -> bool:
    """Whether the upstream refused the request (any 4xx): its writes are dropped."""
    return 400 <= status < 500


class PendingWrites:
    """One rewrite's view of ``store``: writes held here until ``commit`` or ``drop``;
    ``scope`` and ``session`` are whose writes they are (``proxy.store.scopes``)."""

    def __init__(self, store: Store, scope: str = "", session: str = "") -> None:
        self.store = store
        self.scope, self.session = scope, session
        self._writes: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self.settled = ""  # "", "committed" or "dropped"

    @property
    def held_bytes(self) -> int:
        with self._lock:
            return sum(len(k) + len(v) for k, v in self._writes.items())

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._writes)

    def get(self, key: str) -> bytes | None:
        with self._lock:
            value = self._writes.get(key)
        return value if value is not None else self.store.get(key)

    def set(self, key: str, value: bytes) -> None:
        if getattr(self.store, "state", "closed") == "open":  # a breaker whose circuit is open
            raise StoreUnavailable("store unavailable (circuit open)")
        with self._lock:
            if not self.settled:
                self._writes[key] = value
                return
            if self.settled == "dropped":
                return
        with writing_as(self.scope, self.session):  # after the commit: straight through
            self.store.set(key, value)

    def claim(self, key: str, seconds: float) -> bool:
        """Straight to the store: a claim is an expiring lock (one embedder per text
        across threads and replicas), not data."""
        claim = getattr(self.store, "claim", None)
        return True if claim is None else bool(claim(key, seconds))

    def commit(self) -> int:
        """Write what was held to the store (in write order); returns the keys written.
        A key the store cannot take now stays unwritten (a store outage: the rules fail
        open on it later, as for any write that failed)."""
        with self._lock:
            if self.settled:
                return 0
            self.settled = "committed"
            writes, self._writes = self._writes, {}
        written = 0
        with writing_as(self.scope, self.session):
            for key, value in writes.items():
                try:
                    self.store.set(key, value)
                    written += 1
                except StoreUnavailable:
                    continue
        return written

    def drop(self) -> None:
        with self._lock:
            if not self.settled:
                self.settled = "dropped"
            self._writes = {}

    def settle(self, status: int) -> int:
        """``commit`` unless the upstream refused the request (``refused``: ``drop``)."""
        if refused(status):
            self.drop()
            return 0
        return self.commit()


class RoutedStore:
    """The store the rules hold: each call goes to the running rewrite's
    ``PendingWrites`` (``pending``), else to ``store``; anything else is ``store``'s."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.current: ContextVar[PendingWrites | None] = ContextVar("pending_writes", default=None)

    def _target(self) -> Any:
        pending = self.current.get()
        return pending if pending is not None else self.store

    def get(self, key: str) -> bytes | None:
        return self._target().get(key)  # type: ignore[no-any-return]

    def set(self, key: str, value: bytes) -> None:
        self._target().set(key, value)

    def claim(self, key: str, seconds: float) -> bool:
        target = self._target()
        claim = getattr(target, "claim", None)
        return True if claim is None else bool(claim(key, seconds))

    @contextmanager
    def pending(self, writes: PendingWrites) -> Iterator[PendingWrites]:
        """Route this task's store calls to ``writes`` inside the block."""
        token = self.current.set(writes)
        try:
            yield writes
        finally:
            self.current.reset(token)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)
