"""Ranking with the static table: every request by default (``ranking: request``), a
cold one (no vector of the session's chunks stored yet) with ``ranking: stored``.

Embedding a whole history with the main embedder (MiniLM) would take seconds, so a
request ranks with the static table (``embedder_static``) weighted for the session's own
chunks (``CorpusEmbedder``): every chunk and the question embedded on the request, on a
copy of the session's index (its BM25 terms and index shared, ``SessionIndex.with_vectors``),
ranked as a warm index is, with weaker vectors. Nothing of it is stored. A request with
several zones ranks them all on the one copy it built, and the copy stays with the
session's index until its chunks change.

``prepare`` starts tokenizing a changed set of chunks in a worker thread before the
index's BM25 terms are computed: the tokenizer runs outside the GIL, so on a cold 115k-token
history its ~90 ms overlap the terms' ~90 ms of Python. It is started before the gate
has decided, so a block boundary whose question the gate turns away pays it for nothing
(once per set of chunks). The copy is a function of the chunks' texts alone, whichever
thread built it.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import Any

from context_engine.rules.retrieve.embedder_static import CorpusEmbedder, StaticEmbedder
from context_engine.rules.retrieve.index import Chunk, SessionIndex

_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="static-table")


class ColdRanking:
    def __init__(self, table: StaticEmbedder) -> None:
        self.table = table

    def prepare(self, idx: SessionIndex, chunks: list[Chunk]) -> None:
        """Start weighting the table for ``chunks`` (what ``idx`` is about to hold) and
        tokenizing them, unless its copy already holds them."""
        texts = [c.embed_text for c in chunks]
        last, pending = idx.cold, idx.pending
        if last is not None and [c.embed_text for c in last[0]] == texts \
                or pending is not None and pending[0] == texts:
            return
        idx.pending = (texts, _POOL.submit(self._build, texts))

    def _build(self, texts: list[str]) -> tuple[CorpusEmbedder, Any]:
        weighted = self.table.for_corpus(texts)
        return weighted, weighted.embed(texts)

    def _vectors(self, idx: SessionIndex, texts: list[str]) -> tuple[CorpusEmbedder, Any]:
        pending, idx.pending = idx.pending, None
        if pending is not None and pending[0] == texts:
            return pending[1].result()  # type: ignore[no-any-return]
        return self._build(texts)

    def index(self, idx: SessionIndex) -> tuple[SessionIndex, Callable[[list[str]], Any]]:
        """``idx``'s chunks with the weighted table's vectors, and the embedder of the
        question (the same weights). Built once per set of chunks and kept with the
        session's index: a session's requests between two block boundaries share one copy,
        whatever other sessions ran in between."""
        last: tuple[list[Chunk], SessionIndex, Callable[[list[str]], Any]] | None = idx.cold
        if last is not None and last[0] is idx.chunks:
            return last[1], last[2]
        texts = [c.embed_text for c in idx.chunks]
        weighted, vectors = self._vectors(idx, texts)
        ranked = idx.with_vectors(vectors)
        idx.cold = (idx.chunks, ranked, weighted.embed)
        return ranked, weighted.embed
