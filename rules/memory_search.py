"""Hybrid search over a session's memory and the cited snippet zone it produces.

Coarse recall → fuse → trim:

1. BM25 and cosine scores of every chunk, each min-max normalised over the memory,
   fused as ``w * bm25 + (1 - w) * dense`` with ``w`` raised for queries holding ids,
   numbers, dates or code (``query_analysis.bm25_weight``). A question with several
   parts is also searched per part; a chunk keeps its best score.
2. Chunks at or above ``threshold`` (normalised, so the best chunk scores near 1), best
   first, at most ``top_k``; each brings its ``neighbours`` turns on either side (an
   answer usually sits next to its question).
3. Snippets whose word bigrams overlap the visible window by more than ``max_overlap``
   are dropped (the model already sees them); the rest fill ``max_tokens``.

The zone lists snippets in conversation order, grouped under their session/date
header, each citing its turn number, speaker and tool.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np

from proxy.tokens import TokenCounter
from rules.base import MEMORY_HEADER
from rules.memory_index import Chunk, SessionIndex
from rules.query_analysis import bm25_weight, sub_queries, terms

SNIPPET_OVERHEAD = 8  # citation and line framing of one snippet, in tokens
ZONE_INTRO = "Recalled from earlier in this conversation (#n = original turn number):"


@dataclass(frozen=True)
class SearchParams:
    top_k: int
    threshold: float
    neighbours: int
    max_overlap: float
    max_tokens: int
    bm25_weight: float
    bm25_weight_exact: float
    speaker_weight: float = 1.0
    fusion: str = "minmax"
    expansion: float = 0.0


@dataclass(frozen=True)
class Hit:
    chunk: Chunk
    score: float


def _minmax(x: np.ndarray) -> np.ndarray:
    if x.size == 0:
        return x
    lo, hi = float(x.min()), float(x.max())
    return (x - lo) / (hi - lo) if hi > lo else np.zeros_like(x)


RRF_K = 60


def _rrf(x: np.ndarray) -> np.ndarray:
    """Reciprocal rank 1 / (k + rank), ties broken by position."""
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[np.lexsort((np.arange(len(x)), -x))] = np.arange(1, len(x) + 1)
    return 1.0 / (RRF_K + ranks)


def fused_scores(index: SessionIndex, query: str, embed: Any, p: SearchParams) -> np.ndarray:
    """Best fused score of each chunk over the query, its parts and (``expansion`` > 0)
    a second pass with the rare terms of the three best chunks, weighted by ``expansion``."""
    best = _fuse(index, sub_queries(query), embed, p)
    if p.expansion <= 0 or len(best) < 4:
        return best * _speaker_factor(index, query, p.speaker_weight)
    top = sorted(range(len(best)), key=lambda i: (-best[i], i))[:3]
    asked = set(terms(query))
    extra = sorted({t for i in top for t in terms(index.chunks[i].text) if t not in asked and len(t) > 3})
    if extra:
        again = _fuse(index, [query + " " + " ".join(extra)], embed, p)
        best = np.maximum(best, p.expansion * again)
    return best * _speaker_factor(index, query, p.speaker_weight)


def _fuse(index: SessionIndex, queries: list[str], embed: Any, p: SearchParams) -> np.ndarray:
    best = np.zeros(len(index.chunks), dtype=np.float64)
    vecs = embed(queries)
    for q, vec in zip(queries, vecs):
        w = bm25_weight(q, p.bm25_weight, p.bm25_weight_exact)
        bm, dense = index.bm25_scores(terms(q)), index.dense_scores(vec)
        if p.fusion == "rrf":
            fused = (w * _rrf(bm) + (1 - w) * _rrf(dense)) * (RRF_K + 1)
        else:
            fused = w * _minmax(bm) + (1 - w) * _minmax(dense)
        best = np.maximum(best, fused)
    return best


def _speaker_factor(index: SessionIndex, query: str, weight: float) -> np.ndarray:
    """Entity link: when the query names a speaker, other speakers' turns weigh less."""
    words = set(query.lower().replace("'s", " ").split())
    speakers = {c.speaker for c in index.chunks}
    named = {s for s in speakers if s in words or s.split(" ")[0] in words}
    if not named or weight >= 1.0:
        return np.ones(len(index.chunks))
    return np.array([1.0 if c.speaker in named else weight for c in index.chunks])


def bigrams(text: str) -> set[tuple[str, str]]:
    words = terms(text)
    return set(itertools.pairwise(words)) if len(words) > 1 else {(w, "") for w in words}


def overlap(text: str, visible: set[tuple[str, str]]) -> float:
    grams = bigrams(text)
    return len(grams & visible) / len(grams) if grams else 1.0


def select(index: SessionIndex, scores: np.ndarray, visible_text: str, p: SearchParams,
           counter: TokenCounter) -> list[Hit]:
    """Threshold, top-k, neighbours, overlap filter and token budget, in rank order."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    seeds = [i for i in order[: p.top_k] if scores[i] >= p.threshold]
    by_turn: dict[int, list[int]] = {}
    for i, c in enumerate(index.chunks):
        by_turn.setdefault(c.index, []).append(i)
    turns = sorted(by_turn)
    pos = {t: k for k, t in enumerate(turns)}
    wanted: list[int] = []
    for i in seeds:
        k = pos[index.chunks[i].index]
        near = [turns[j] for j in range(max(0, k - p.neighbours), min(len(turns), k + p.neighbours + 1))]
        wanted += [i] + [n for t in near for n in by_turn[t] if n != i]
    visible = bigrams(visible_text)
    seen: set[int] = set()
    hits, used = [], 0
    for i in wanted:
        c = index.chunks[i]
        if i in seen or overlap(c.text, visible) > p.max_overlap:
            continue
        seen.add(i)
        cost = counter.text(c.text) + SNIPPET_OVERHEAD
        if used + cost > p.max_tokens:
            continue
        used += cost
        hits.append(Hit(c, round(float(scores[i]), 4)))
    while hits and counter.text(render(hits)) > p.max_tokens:
        hits.pop()  # headers and citations pushed the zone over budget: drop the lowest rank
    return hits


def cite(c: Chunk) -> str:
    who = f"{c.role} {c.tool}".strip() if c.tool else c.role
    return f"#{c.index} {who}: {c.text}"


def render(hits: list[Hit]) -> str:
    """The zone text: header line, intro, then snippets in order under their headers."""
    lines = [MEMORY_HEADER, ZONE_INTRO]
    header = None
    for h in sorted(hits, key=lambda h: (h.chunk.index, h.chunk.text)):
        if h.chunk.header != header and h.chunk.header:
            lines.append(h.chunk.header)
        header = h.chunk.header
        lines.append(cite(h.chunk))
    return "\n".join(lines)
