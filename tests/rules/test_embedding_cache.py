"""Each text is embedded once across callers sharing a store (threads, replicas), and a
claimant that never stores its vector holds nobody up for long."""

from __future__ import annotations

import os
import threading
import time
import uuid

import numpy as np
import pytest

from context_engine.proxy.store.stores import DiskStore, MemoryStore
from context_engine.rules.retrieve import embedding_cache
from context_engine.rules.retrieve.embedders import HashingEmbedder
from context_engine.rules.retrieve.embedding_cache import EmbeddingCache

REDIS = os.environ.get("CONTEXT_ENGINE_TEST_REDIS", "")


class SlowEmbedder(HashingEmbedder):
    """Slow enough that callers racing for the same texts overlap."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []
        self._lock = threading.Lock()

    def embed(self, texts):
        with self._lock:
            self.texts += texts
        time.sleep(0.05)
        return super().embed(texts)


def _stores(tmp_path):
    yield "memory", lambda: MemoryStore()
    disk = DiskStore(str(tmp_path / "store"))
    yield "disk", lambda: disk
    if REDIS:
        from context_engine.proxy.store.stores import open_store

        yield "redis", lambda: open_store(REDIS)  # each replica its own client


def test_callers_racing_for_the_same_texts_embed_each_once(tmp_path):
    for name, store_for in _stores(tmp_path):
        shared = store_for() if name == "memory" else None
        texts = [f"{name} text {i} {uuid.uuid4()}" for i in range(12)]
        embedder = SlowEmbedder()
        caches = [EmbeddingCache(embedder, shared or store_for()) for _ in range(4)]
        results: dict[int, np.ndarray] = {}
        threads = [threading.Thread(target=lambda c=c, k=k: results.__setitem__(k, c.get(texts[k:] + texts[:k])))  # noqa: B023 (joined in this iteration)
                   for k, c in enumerate(caches)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(results) == 4 and sorted(embedder.texts) == sorted(texts), name  # once each
        assert sum(c.embedded for c in caches) == len(texts)
        expected = HashingEmbedder().embed(texts)
        for k, rows in results.items():
            assert np.allclose(rows, np.roll(expected, -k, axis=0)), name


def test_a_claim_whose_owner_never_stores_is_waited_for_briefly_then_embedded_here(monkeypatch):
    monkeypatch.setattr(embedding_cache, "CLAIM_WAIT", 0.2)
    store = MemoryStore()
    cache = EmbeddingCache(SlowEmbedder(), store)
    assert store.claim("claim:" + cache._key("orphan"), 60)  # a replica that then died
    start = time.monotonic()
    rows = cache.get(["orphan", "fresh"])
    assert 0.2 <= time.monotonic() - start < 2.0
    assert cache.embedded == 2 and np.allclose(rows, HashingEmbedder().embed(["orphan", "fresh"]))
    assert cache.get(["orphan"]).shape == (1, rows.shape[1]) and cache.embedded == 2


@pytest.mark.parametrize("seconds", [0.05])
def test_a_claim_expires(seconds):
    store = MemoryStore()
    assert store.claim("k", seconds) and not store.claim("k", seconds)
    time.sleep(seconds * 2)
    assert store.claim("k", seconds)


def test_a_request_never_waits_for_a_text_claimed_elsewhere():
    """The claimant may be the background lane (lowest priority, yields to requests):
    a request leaves that text without a vector instead of waiting for it."""
    store = MemoryStore()
    cache = EmbeddingCache(SlowEmbedder(), store)
    assert store.claim("claim:" + cache._key("busy"), 60)  # the background lane embeds it
    start = time.monotonic()
    rows = cache.get_unclaimed(["busy", "fresh", "busy"])
    assert time.monotonic() - start < embedding_cache.CLAIM_WAIT / 2
    assert rows[0] is None and rows[2] is None and cache.embedded == 1
    assert rows[1] is not None and np.allclose(rows[1], HashingEmbedder().embed(["fresh"])[0])
    store.set(cache._key("busy"), HashingEmbedder().embed(["busy"])[0].tobytes())  # it lands
    (landed,) = cache.get_unclaimed(["busy"])
    assert landed is not None and np.allclose(landed, HashingEmbedder().embed(["busy"])[0])
    assert cache.embedded == 1
