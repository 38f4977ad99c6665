"""Embedding ahead for ``retrieve``: the turns a session will drop at a later block boundary.

Once a request has been rewritten, the turns of its raw tail before the last user turn
are final: the chunk of each (with its neighbours' edges) is exactly what will be
embedded when its block closes. ``Prefetcher.run`` embeds them between requests, off the
request path, so the request at the boundary finds them in the store. Embeddings are
content-addressed and batch-invariant (``embedders.MiniLMEmbedder.embed``): prefetching
changes no output, only when the work is done. Each session's turns are looked at once.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from rules.base import last_user_index
from rules.memory_index import Chunk, EmbeddingCache

Chunker = Callable[[list[Any], int, int], list[Chunk]]  # (messages, start, end) → chunks
RECENT = 8  # requests remembered between two runs


class Prefetcher:
    def __init__(self, cache: EmbeddingCache, chunks: Chunker, max_sessions: int) -> None:
        self.cache = cache
        self.chunks = chunks
        self.max_sessions = max_sessions
        self.pending: list[tuple[str, list[Any], int]] = []  # (session, messages, cut)
        self.done: OrderedDict[str, int] = OrderedDict()  # session → messages looked at

    def remember(self, session: str, messages: list[Any], cut: int) -> None:
        """Note a request whose raw tail begins at ``cut`` (the newest few only)."""
        self.pending = (self.pending + [(session, messages, cut)])[-RECENT:]

    def run(self) -> int:
        """Embed the remembered tails' turns; returns how many texts were embedded."""
        pending, self.pending = self.pending, []
        texts: set[str] = set()
        for session, messages, cut in pending:
            done = self.done.pop(session, 0)
            end = last_user_index(messages)
            start = max(cut, done)
            if end > start:
                texts.update(c.embed_text for c in self.chunks(messages, start, end))
            self.done[session] = max(done, end)
            while len(self.done) > self.max_sessions:
                self.done.popitem(last=False)
        before = self.cache.embedded
        if texts:
            self.cache.get(sorted(texts))
        return self.cache.embedded - before
