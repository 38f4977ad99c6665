"""Per-session long memory: chunks with provenance, incremental BM25 + faiss indexes.

- ``chunk_messages`` (``chunks.py``): one chunk per turn, with its provenance.
- ``SessionIndex``: one session's chunks. BM25 (rank-bm25) is rebuilt lazily, only when
  the chunk set changed; vectors are looked up or embedded only when a search needs
  them, at most a capped number per call (``embedders.EmbeddingCache`` stores each
  text's vector once, across sessions and restarts).
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import faiss
import numpy as np
from rank_bm25 import BM25Okapi

from context_engine.rules.retrieve.chunks import Chunk, chunk_messages
from context_engine.rules.retrieve.embedding_cache import EmbeddingCache
from context_engine.rules.retrieve.query import terms

__all__ = ["Chunk", "EmbeddingCache", "SessionIndex", "chunk_messages"]


class SessionIndex:
    """The searchable memory of one session (never shared with another session).

    Vectors are lazy: ``sync`` only adds chunks and their BM25 terms; ``vectorize``
    fills vectors from the store and embeds at most ``cap`` missing ones, best
    candidates first. ``dense_scores`` scores the chunks that have a vector; the others
    score as the lowest of those (BM25 alone ranks them). With every vector present the
    scores are exactly those of a full index. Callers hold ``lock`` while they use it.
    """

    def __init__(self, session_id: str, cache: EmbeddingCache) -> None:
        self.session_id = session_id
        self.cache = cache
        self.lock = threading.RLock()
        self.chunks: list[Chunk] = []
        self.keys: set[str] = set()
        self._rows: list[np.ndarray | None] = []
        self._dense: Any = None  # faiss index over the rows that have a vector
        self._dense_ids: np.ndarray | None = None
        self._bm25: BM25Okapi | None = None
        self._terms: list[list[str]] = []
        self.last_injected: list[str] | None = None
        self._vocab: set[str] | None = None
        self._df: Counter[str] | None = None
        self._speakers: set[str] | None = None
        self._voices: set[str] | None = None
        self.cold: Any = None  # the static table's copy of these chunks (``cold.ColdRanking``)
        self.pending: Any = None  # (texts, future of their weighted table and vectors)

    def oscillation(self, injected: list[str]) -> float | None:
        """Share of the injected snippets that were not injected on the previous
        retrieving turn of this session (None on the first)."""
        prev, self.last_injected = self.last_injected, (injected or self.last_injected)
        if not injected or prev is None:
            return None
        return round(len(set(injected) - set(prev)) / len(injected), 3)

    def sync(self, chunks: list[Chunk]) -> int:
        """Make the index hold exactly ``chunks``; returns how many were new.

        Appending (the usual case between requests) keeps what is there; any other
        change starts over (vectors come back from the embedding cache).
        """
        if self.chunks == chunks[: len(self.chunks)]:
            new = chunks[len(self.chunks):]
        else:
            self.chunks, self.keys, self._rows, self._terms = [], set(), [], []
            self._dense = None
            new = chunks
        if not new:
            return 0
        self.chunks = self.chunks + list(new)
        self._rows = self._rows + [None] * len(new)
        self.keys |= {c.key for c in new}
        self._terms = self._terms + [terms(c.search_text) or ["\x00"] for c in new]
        self._bm25 = None
        self._vocab = self._df = None
        self._speakers = self._voices = None
        return len(new)

    def with_vectors(self, vectors: np.ndarray) -> SessionIndex:
        """A copy holding the same chunks, with ``vectors`` (one per chunk, from another
        embedder) as their rows: the BM25 terms and index are this one's, built once for
        both. The copy stores nothing; this index keeps its own rows."""
        if self._bm25 is None and self._terms:
            self._bm25 = BM25Okapi(self._terms)
        other = SessionIndex(self.session_id, self.cache)
        other.chunks, other.keys, other._terms, other._bm25 = self.chunks, set(self.keys), self._terms, self._bm25
        other._vocab, other._df, other._speakers, other._voices = self._vocab, self._df, self._speakers, self._voices
        other._rows = list(vectors)
        return other

    def missing(self) -> list[int]:
        return [i for i, r in enumerate(self._rows) if r is None]

    def has_vector(self) -> np.ndarray:
        """Whether each chunk has its vector (a bool per chunk)."""
        return np.array([r is not None for r in self._rows], dtype=bool)

    def vectorize(self, order: list[int] | None = None, cap: int | None = None,
                  lookup: bool = True) -> tuple[list[int], int]:
        """Fill vectors from the store (unless ``lookup`` is off), then embed up to
        ``cap`` (None: all) of the missing chunks in ``order`` (default: chunk order).
        Returns the chunks still without a vector and the number embedded."""
        missing = self.missing()
        if not missing:
            return [], 0
        found = self.cache.lookup([self.chunks[i].embed_text for i in missing]) if lookup \
            else [None] * len(missing)
        for i, vec in zip(missing, found):
            self._rows[i] = vec
        missing = [i for i, vec in zip(missing, found) if vec is None]
        take: list[int] = []
        if missing and cap != 0:
            wanted = set(missing)
            first = [i for i in (order if order is not None else missing) if i in wanted]
            listed = set(first)
            first += [i for i in missing if i not in listed]
            take = first if cap is None else first[:cap]
            texts = [self.chunks[i].embed_text for i in take]
            # capped (a request's allowance): never wait for a text being embedded elsewhere
            got = self.cache.get(texts) if cap is None else self.cache.get_unclaimed(texts)
            for i, vec in zip(take, got):
                self._rows[i] = vec
            missing = [i for i in missing if self._rows[i] is None]
        if len(missing) < len(found):
            self._dense = None
        return missing, len(take)

    def _dense_index(self) -> tuple[Any, np.ndarray]:
        if self._dense is None:
            ids = np.array([i for i, r in enumerate(self._rows) if r is not None], dtype=np.int64)
            rows = np.stack([self._rows[i] for i in ids]).astype(np.float32)
            self._dense = faiss.IndexFlatIP(rows.shape[1])
            self._dense.add(rows)
            self._dense_ids = ids
        assert self._dense_ids is not None
        return self._dense, self._dense_ids

    @property
    def speakers(self) -> set[str]:
        """Speakers named at the start of turns ("caroline"), lower-case."""
        if self._speakers is None:
            self._speakers = {c.speaker for c in self.chunks if c.named}
        return self._speakers

    @property
    def voices(self) -> set[str]:
        """The speakers of a conversation between named people: those who open at least
        a tenth of the user and assistant turns ("Caroline: …"), not a tool's "Error: …"."""
        if self._voices is None:
            said = Counter(c.speaker for c in self.chunks if c.named and c.role in ("user", "assistant"))
            self._voices = {s for s, n in said.items() if n >= max(3, len(self.chunks) / 10)}
        return self._voices

    def frequency(self, term: str) -> int:
        """How many chunks hold ``term``."""
        if self._df is None:
            self._df = Counter(t for doc in self._terms for t in set(doc))
        return self._df[term]

    @property
    def vocabulary(self) -> set[str]:
        if self._vocab is None:
            self._vocab = {t for doc in self._terms for t in doc}
        return self._vocab

    def bm25_scores(self, query_terms: list[str]) -> np.ndarray:
        if not self.chunks or not query_terms:
            return np.zeros(len(self.chunks), dtype=np.float64)
        if self._bm25 is None:
            self._bm25 = BM25Okapi(self._terms)
        return np.asarray(self._bm25.get_scores(query_terms), dtype=np.float64)

    def dense_scores(self, query_vec: np.ndarray) -> np.ndarray:
        if not self.chunks or all(r is None for r in self._rows):
            return np.zeros(len(self.chunks), dtype=np.float64)
        index, ids = self._dense_index()
        scores, found = index.search(query_vec.reshape(1, -1).astype(np.float32), len(ids))
        out = np.full(len(self.chunks), float(scores[0].min()), dtype=np.float64)
        out[ids[found[0]]] = scores[0]
        return out
