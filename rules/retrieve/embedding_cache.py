"""Embeddings stored under the hash of (embedder, text): computed once, ever, fleet-wide.

The store is the cache: a text whose vector is stored is never embedded again, by this
process, a restarted one or another replica sharing the store. Two embedders racing
for the same missing text (a request and the background prefetch, or two replicas)
would both embed it, so each missing text is first *claimed* in the store (Redis
``SET NX`` with an expiry, ``store.claim``): the claimant embeds and stores it, the
others wait up to ``CLAIM_WAIT`` seconds for the stored vector, then embed it themselves
(a claimant that died never blocks anyone for long). A store without ``claim`` skips it.

A request never waits on a claim (``get_unclaimed``): the claimant may be the background
lane, which runs at the lowest priority and yields to requests, so waiting for it
would stall the request until the rules' deadline. A text claimed elsewhere is left
without a vector for that request (BM25 ranks it, as it ranks texts past ``max_embed``).
"""

from __future__ import annotations

import hashlib
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from context_engine.proxy.engine.contract import Embedder

CLAIM_SECONDS = 10.0  # a claim to embed a text expires after this long
CLAIM_WAIT = 2.0  # seconds to wait for a text another caller claimed, then embed it here
POLL = 0.01


class EmbeddingCache:
    def __init__(self, embedder: Embedder, store: Any) -> None:
        self.embedder = embedder
        self.store = store
        self.embedded = 0  # texts sent to the embedder (tests and /healthz count them)
        self._lock = threading.Lock()

    def _key(self, text: str) -> str:
        return f"emb:{self.embedder.name}:" + hashlib.sha256(text.encode()).hexdigest()[:32]

    def lookup(self, texts: list[str]) -> list[np.ndarray | None]:
        """The stored vector of each text, None where there is none (nothing embedded)."""
        rows: list[np.ndarray | None] = []
        for text in texts:
            raw = self.store.get(self._key(text))
            rows.append(np.frombuffer(raw, dtype=np.float32) if raw else None)
        return rows

    def _embed(self, texts: list[str]) -> dict[str, np.ndarray]:
        """Embed and store ``texts``."""
        if not texts:
            return {}
        with self._lock:
            self.embedded += len(texts)
        fresh = dict(zip(texts, self.embedder.embed(texts)))
        for text, vec in fresh.items():
            self.store.set(self._key(text), vec.astype(np.float32).tobytes())
        return fresh

    def _claim(self, texts: list[str]) -> tuple[list[str], list[str]]:
        """(texts this caller now embeds, texts another caller is embedding)."""
        claim = getattr(self.store, "claim", None)
        if claim is None:
            return texts, []
        mine: list[str] = []
        theirs: list[str] = []
        for text in texts:
            (mine if claim("claim:" + self._key(text), CLAIM_SECONDS) else theirs).append(text)
        return mine, theirs

    def _wait(self, texts: list[str]) -> dict[str, np.ndarray]:
        """The vectors of ``texts`` stored by their claimants within ``CLAIM_WAIT``."""
        found: dict[str, np.ndarray] = {}
        deadline = time.monotonic() + CLAIM_WAIT
        while True:
            left = [t for t in texts if t not in found]
            for text, row in zip(left, self.lookup(left)):
                if row is not None:
                    found[text] = row
            if len(found) == len(texts) or time.monotonic() >= deadline:
                return found
            time.sleep(POLL)

    def _embed_missing(self, texts: list[str], rows: list[np.ndarray | None]) -> int:
        """Embed and store the texts whose row is None (filled in place); returns how many."""
        missing = sorted({texts[i] for i, r in enumerate(rows) if r is None})
        if not missing:
            return 0
        mine, theirs = self._claim(missing)
        fresh = self._embed(mine)
        found = self._wait(theirs) if theirs else {}
        late = self._embed([t for t in theirs if t not in found])  # their claimant gave up
        fresh.update(found)
        fresh.update(late)
        for i, r in enumerate(rows):
            if r is None:
                rows[i] = fresh[texts[i]]
        return len(mine) + len(late)

    def get_unclaimed(self, texts: list[str]) -> list[np.ndarray | None]:
        """Each text's vector: stored, or embedded here; None for a text another caller
        has claimed (it is being embedded elsewhere; never waited for)."""
        rows = self.lookup(texts)
        missing = sorted({texts[i] for i, r in enumerate(rows) if r is None})
        fresh = self._embed(self._claim(missing)[0]) if missing else {}
        return [r if r is not None else fresh.get(t) for t, r in zip(texts, rows)]

    def ensure(self, texts: list[str]) -> int:
        """Make sure every text has a stored vector; returns how many were embedded."""
        return self._embed_missing(texts, self.lookup(texts))

    def get(self, texts: list[str]) -> np.ndarray:
        rows = self.lookup(texts)
        self._embed_missing(texts, rows)
        if not rows:
            return np.zeros((0, self.embedder.dim), dtype=np.float32)
        return np.stack([r for r in rows if r is not None]).astype(np.float32)
