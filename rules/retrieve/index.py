"""Per-session long memory: chunks with provenance, incremental BM25 + faiss indexes.

- ``chunk_messages``: one chunk per turn; a long tool result is cut by records (lines or
  JSON array items) into pieces of at most ``max_chunk_chars``. Each chunk keeps its
  provenance: message index, role, the session/date header in force ("[Session 3, 1:14
  pm on 25 May, 2023]") and the tool name, so an injected snippet carries time and source.
- ``SessionIndex``: one session's chunks. BM25 (rank-bm25) is rebuilt lazily, only when
  the chunk set changed; vectors are looked up or embedded only when a search needs
  them, at most a capped number per call (``embedders.EmbeddingCache`` stores each
  text's vector once, across sessions and restarts).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

import faiss
import numpy as np
from rank_bm25 import BM25Okapi

from context_engine.proxy.engine.messages import SPEAKER, ClientText, call_index, text_of
from context_engine.rules.retrieve.embedding_cache import EmbeddingCache
from context_engine.rules.retrieve.query import SESSION as _SESSION
from context_engine.rules.retrieve.query import terms

__all__ = ["Chunk", "EmbeddingCache", "SessionIndex", "chunk_messages"]


@dataclass(frozen=True)
class Chunk:
    """One retrievable piece of history with where it came from."""

    index: int  # message index in the request it was cut from
    role: str
    text: str
    header: str = ""  # session/date header in force at that turn
    tool: str = ""
    context: str = ""  # the end of the previous turn: what a reply is about (search only)

    @property
    def key(self) -> str:
        return hashlib.sha256(f"{self.header}\x00{self.text}".encode()).hexdigest()[:24]

    @property
    def speaker(self) -> str:
        """A named speaker ("Caroline: …") or the role."""
        found = SPEAKER.match(self.text)
        return found.group(1).lower() if found else self.role

    @property
    def named(self) -> bool:
        """Whether the text starts with a speaker's name ("Caroline: …")."""
        return bool(SPEAKER.match(self.text))

    @property
    def search_text(self) -> str:
        """What BM25 matches: the turn with its header and its neighbours' edges."""
        return " ".join(p for p in (self.header, self.context, self.text) if p)

    @property
    def embed_text(self) -> str:
        """What is embedded: the turn and its header, then its neighbours' edges (the
        embedder truncates long texts, and the turn itself must not be what is cut)."""
        return " ".join(p for p in (self.header, self.text, self.context) if p)


def _records(text: str, limit: int) -> list[str]:
    """Cut a long tool output into pieces at record boundaries."""
    if len(text) <= limit:
        return [text]
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        data = None
    if isinstance(data, list):
        items = [json.dumps(x, ensure_ascii=False, separators=(",", ":")) for x in data]
    elif isinstance(data, dict):
        items = [json.dumps({k: v}, ensure_ascii=False, separators=(",", ":")) for k, v in data.items()]
    else:
        items = text.split("\n")
    pieces: list[str] = []
    cur = ""
    for item in items:
        while len(item) > limit:
            pieces, cur = pieces + ([cur] if cur else []) + [item[:limit]], ""
            item = item[limit:]
        if cur and len(cur) + len(item) + 1 > limit:
            pieces.append(cur)
            cur = ""
        cur = f"{cur}\n{item}" if cur else item
    return pieces + ([cur] if cur else [])


def _call_text(m: dict[str, Any]) -> str:
    calls = [f"{(c.get('function') or {}).get('name', '')}({(c.get('function') or {}).get('arguments', '')})"
             for c in m.get("tool_calls") or ()]
    return "\n".join([text_of(m)] * bool(text_of(m)) + calls)


def _context(texts: list[str], i: int, chars: int) -> str:
    """The end of the turn before and the start of the turn after, within one session."""
    if chars <= 0:
        return ""
    before = texts[i - 1][-chars:] if i > 0 and not _SESSION.match(texts[i]) else ""
    after = texts[i + 1][:chars] if i + 1 < len(texts) and not _SESSION.match(texts[i + 1]) else ""
    return " ".join(p for p in (_SESSION.sub("", before), after) if p)


def chunk_messages(messages: list[Any], start: int, end: int, max_chunk_chars: int,
                   skip_prefixes: tuple[str, ...] = (), keep: frozenset[int] = frozenset(),
                   context_chars: int = 0) -> list[Chunk]:
    """Chunks of ``messages[start:end]`` but ``keep``; headers are tracked from index 0.

    With ``context_chars``, each chunk is searched together with the neighbouring turns'
    edges (a reply is about the turn before it); the snippet shows only its own text.
    """
    names = {cid: name for cid, (name, _) in call_index(messages[:end]).items()}
    texts = [_call_text(m) if m.get("role") == "assistant" else text_of(m)
             for m in messages[: end + 1]]
    header, out = "", []
    for i, m in enumerate(messages[:end]):
        text = texts[i]
        found = _SESSION.match(text)
        if found:
            header = f"[{found.group(1)}]"
        if i < start or i in keep or not text.strip() or (
                text.startswith(skip_prefixes) and not isinstance(m, ClientText)):
            continue
        body = text[found.end():] if found else text
        tool = names.get(str(m.get("tool_call_id", "")), "") if m.get("role") == "tool" else ""
        context = _context(texts, i, context_chars)
        for piece in _records(body, max_chunk_chars):
            out.append(Chunk(i, str(m.get("role", "")), piece, header, tool, context))
    return out


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
