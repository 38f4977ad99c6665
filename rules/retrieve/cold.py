"""A cold request's ranking: while the store holds no vector of a session's chunks.

Embedding a whole history with the main embedder (MiniLM) would take seconds, so a cold
request ranks with the static table (``embedder_static``) weighted for the session's own
chunks (``CorpusEmbedder``): every chunk and the question embedded on the request, on a
copy of the session's index (its BM25 terms and index shared, ``SessionIndex.with_vectors``),
ranked as a warm index is, with weaker vectors. Nothing of it is stored; the background
still embeds the history with the main embedder, whose vectors rank every later request.
A request with several zones ranks them all on the one copy it built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from context_engine.rules.retrieve.embedder_static import StaticEmbedder
from context_engine.rules.retrieve.index import Chunk, SessionIndex


class ColdRanking:
    def __init__(self, table: StaticEmbedder) -> None:
        self.table = table

    def index(self, idx: SessionIndex) -> tuple[SessionIndex, Callable[[list[str]], Any]]:
        """``idx``'s chunks with the weighted table's vectors, and the embedder of the
        question (the same weights). Built once per set of chunks and kept with the
        session's index (``ranking: request`` ranks every request this way: a session's
        requests between two block boundaries share one copy, whatever other sessions
        ran in between)."""
        last: tuple[list[Chunk], SessionIndex, Callable[[list[str]], Any]] | None = idx.cold
        if last is not None and last[0] is idx.chunks:
            return last[1], last[2]
        texts = [c.embed_text for c in idx.chunks]
        weighted = self.table.for_corpus(texts)
        ranked = idx.with_vectors(weighted.embed(texts))
        idx.cold = (idx.chunks, ranked, weighted.embed)
        return ranked, weighted.embed
