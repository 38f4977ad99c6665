"""Embedding ahead for ``retrieve``, in the background lane: the turns a session dropped
without a vector yet, and the turns it will drop at a later block boundary.

Only sessions where ``retrieve`` drops something are looked at (no embedding work for a
session until then). ``fill`` notes the dropped chunks a request searched without
vectors (its embedding is capped: ``retrieve.max_embed``); ``remember`` notes a request
whose raw tail before the last user turn is final: the chunk of each of those turns
(with its neighbours' edges) is exactly what will be embedded when its block closes.
``Prefetcher.run`` embeds both, dropped chunks first, in small batches with a ``pause``
between them (where the background lane gives way to requests). Embeddings are
content-addressed and batch-invariant (``embedders.MiniLMEmbedder.embed``): prefetching
changes no output, only when the work is done. Each session's tail is looked at once;
every table here is bounded (``max_sessions`` sessions, ``RECENT`` requests).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from context_engine.proxy.engine.messages import last_user_index
from context_engine.rules.retrieve.index import Chunk, EmbeddingCache

Chunker = Callable[[list[Any], int, int], list[Chunk]]  # (messages, start, end) → chunks
RECENT = 8  # requests remembered between two runs
BATCH = 16  # texts embedded between two pauses


class Prefetcher:
    def __init__(self, cache: EmbeddingCache, chunks: Chunker, max_sessions: int) -> None:
        self.cache = cache
        self.chunks = chunks
        self.max_sessions = max_sessions
        self._lock = threading.Lock()
        self.pending: list[tuple[str, list[Any], int]] = []  # (session, messages, cut)
        self.fills: OrderedDict[str, list[str]] = OrderedDict()  # session → texts to embed
        self.done: OrderedDict[str, int] = OrderedDict()  # session → messages looked at

    def remember(self, session: str, messages: list[Any], cut: int) -> None:
        """Note a request whose raw tail begins at ``cut`` (the newest few only)."""
        with self._lock:
            self.pending = (self.pending + [(session, messages, cut)])[-RECENT:]

    def fill(self, session: str, texts: list[str]) -> None:
        """Note dropped chunks a request searched without a vector (newest sessions kept)."""
        with self._lock:
            self.fills.pop(session, None)
            self.fills[session] = list(texts)
            while len(self.fills) > self.max_sessions:
                self.fills.popitem(last=False)

    def forget(self, session: str) -> None:
        """Drop what ``session``'s requests noted (the upstream refused the last one)."""
        with self._lock:
            self.pending = [p for p in self.pending if p[0] != session]
            self.fills.pop(session, None)

    def run(self, pause: Callable[[], None] | None = None) -> int:
        """Embed the noted texts; returns how many were embedded."""
        with self._lock:
            pending, self.pending = self.pending, []
            fills, self.fills = self.fills, OrderedDict()
            tails: list[tuple[list[Any], int, int]] = []
            for session, messages, cut in pending:
                done = self.done.pop(session, 0)
                end = last_user_index(messages)
                if end > max(cut, done):
                    tails.append((messages, max(cut, done), end))
                self.done[session] = max(done, end)
                while len(self.done) > self.max_sessions:
                    self.done.popitem(last=False)
        first = sorted({t for texts in reversed(fills.values()) for t in texts})
        later = {c.embed_text for m, s, e in tails for c in self.chunks(m, s, e)}
        texts = first + sorted(later - set(first))
        embedded = 0
        for start in range(0, len(texts), BATCH):
            if pause is not None and start:
                pause()
            embedded += self.cache.ensure(texts[start:start + BATCH])
        return embedded
