"""Hybrid search over a session's memory and the cited snippet zone it produces.

Coarse recall → fuse → trim:

1. BM25 and cosine scores of every chunk, each min-max normalised over the memory,
   fused as ``w * bm25 + (1 - w) * dense`` with ``w`` raised for queries holding ids,
   numbers, dates or code (``query_analysis.bm25_weight``). The query is also searched
   in other forms and a chunk keeps its best score: per part when it joins several
   asks, and (``name_blind``) without the conversation's speakers' names.
2. Date scope (``date_boost``): when the query names a month and year, turns from
   sessions dated then score higher.
3. Entity-linked expansion (``expansion``, off by default): names and quoted titles in the three best
   chunks that the query did not name are searched with BM25, scaled by the score of
   the chunk they came from (the second hop of a multi-hop question: "what book did
   she recommend?" → "Becoming Nicole" → the turn where the other speaker read it).
4. The ``top_k`` best chunks at or above ``threshold`` are seeds. Each turn within
   ``neighbours`` of a seed competes with ``neighbour_decay ** distance`` times the
   seed's score (an answer usually sits next to its question).
5. Snippets whose word bigrams overlap the visible window by more than ``max_overlap``
   are dropped (the model already sees them); the rest fill ``max_tokens`` best first.
   In a conversation between named people (``length_prior``), a turn shorter than
   ``PRIOR_TOKENS`` fills with its score times ``(tokens / PRIOR_TOKENS) ** length_prior``:
   a reaction ("Wow, that's great!") tells less than the turns that say something.

The zone lists snippets in conversation order, grouped under their session/date
header, each citing its turn number and speaker (its role and tool when the text
does not start with a speaker's name).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from context_engine.proxy.engine.messages import MEMORY_HEADER
from context_engine.proxy.engine.tokens import TokenCounter
from context_engine.rules.retrieve.index import Chunk, SessionIndex
from context_engine.rules.retrieve.query import (
    bm25_weight,
    linked_entities,
    months,
    sub_queries,
    terms,
    without_names,
)
from context_engine.rules.zones.fence import quote_role_labels

SNIPPET_OVERHEAD = 8  # citation and line framing of one snippet, in tokens
PRIOR_TOKENS = 100  # a named speaker's turn this long (framing included) or longer fills at its score
ZONE_INTRO = "Recalled from earlier in this conversation (#n = original turn number):"
KB_INTRO = "From the knowledge base (#n = clause number of the document named above it):"
BOTH_INTRO = ("Recalled from earlier in this conversation (#n = original turn number) and from "
              "the knowledge base (#n = clause number of the document named above it):")


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
    neighbour_decay: float = 0.7
    name_blind: bool = True
    date_boost: float = 0.0
    length_prior: float = 0.0


@dataclass(frozen=True)
class Hit:
    chunk: Chunk
    score: float
    note: str = ""  # shown after the snippet: "(earlier than #213 on yoga)" (``updates``)


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
    """Best fused score of each chunk over the query's forms, plus the date scope and
    the entity-linked second pass (module docstring, steps 1-3)."""
    speakers = index.speakers
    queries = sub_queries(query, frozenset(t for v in index.voices for t in terms(v)))
    if p.name_blind and index.voices:
        blind: dict[tuple[str, ...], str] = {}
        for q in queries:  # each set of words once; a form that was only names goes
            b = without_names(q, index.voices)
            blind.setdefault(tuple(terms(b)), b)
        queries = [b for t, b in blind.items() if t] or queries
    best = _fuse(index, queries, embed, p)
    scoped = months(query)
    if p.date_boost > 0 and scoped:
        best = best + p.date_boost * np.array([bool(months(c.header) & scoped) for c in index.chunks])
    if p.expansion > 0 and len(best) > 3:
        first = best.copy()
        asked = set(terms(query))
        for i in sorted(range(len(first)), key=lambda i: (-first[i], i))[:3]:
            for name in linked_entities([index.chunks[i].text], speakers, asked):
                hop = _minmax(index.bm25_scores(terms(name)))
                best = np.maximum(best, p.expansion * float(first[i]) * hop)
    return best * _speaker_factor(index, query, p.speaker_weight)


def _fuse(index: SessionIndex, queries: list[str], embed: Any, p: SearchParams) -> np.ndarray:
    """Each chunk's best fused score over the query's forms. A chunk with no vector yet
    (a cold store: ``max_embed``) is scored by BM25 alone, on the same 0-1 scale, not
    by BM25's share of the fusion: otherwise a cold request's chunks could not reach
    ``threshold`` and its zone would come back nearly empty."""
    best = np.zeros(len(index.chunks), dtype=np.float64)
    has = index.has_vector()
    # no chunk with a vector (a cold store): the query's vectors would score nothing
    vecs = embed(queries) if has.any() else np.zeros((len(queries), 1), dtype=np.float32)
    for q, vec in zip(queries, vecs):
        w = bm25_weight(q, p.bm25_weight, p.bm25_weight_exact)
        bm, dense = index.bm25_scores(terms(q)), index.dense_scores(vec)
        if p.fusion == "rrf":
            fused = (w * _rrf(bm) + (1 - w) * _rrf(dense)) * (RRF_K + 1)
            alone = _rrf(bm) * (RRF_K + 1)
        else:
            fused = w * _minmax(bm) + (1 - w) * _minmax(dense)
            alone = _minmax(bm)
        best = np.maximum(best, np.where(has, fused, alone))
    return best


def _speaker_factor(index: SessionIndex, query: str, weight: float) -> np.ndarray:
    """Entity link: when the query names a speaker, other speakers' turns weigh less."""
    if weight >= 1.0:
        return np.ones(len(index.chunks))
    words = set(query.lower().replace("'s", " ").split())
    named = {s for s in {c.speaker for c in index.chunks} if s in words or s.split(" ")[0] in words}
    if not named:
        return np.ones(len(index.chunks))
    return np.array([1.0 if c.speaker in named else weight for c in index.chunks])


def bigrams(text: str) -> set[tuple[str, str]]:
    words = terms(text)
    return set(itertools.pairwise(words)) if len(words) > 1 else {(w, "") for w in words}


def overlap(text: str, visible: set[tuple[str, str]]) -> float:
    grams = bigrams(text)
    return len(grams & visible) / len(grams) if grams else 1.0


def select(index: SessionIndex, scores: np.ndarray, visible_text: str, p: SearchParams,
           counter: TokenCounter, first: Sequence[tuple[int, float]] = (),
           first_tokens: int = 0) -> list[Hit]:
    """Seeds, their neighbours, overlap filter and token budget (module docstring,
    steps 4-5), best first. ``first`` (chunk, score) pairs come before them, within
    ``first_tokens`` of the budget (a question asking for advice: ``profile``)."""
    visible = bigrams(visible_text)
    hits: list[Hit] = []
    used, taken = 0, set()
    costs: dict[int, int] = {}

    def cost_of(i: int) -> int:
        if i not in costs:
            costs[i] = counter.text(index.chunks[i].text) + SNIPPET_OVERHEAD
        return costs[i]

    pools = ((first, min(first_tokens, p.max_tokens)),
             (_by_length(index, _candidates(index, scores, p), p.length_prior, cost_of), p.max_tokens))
    for pool, cap in pools:
        for i, score in pool:
            c = index.chunks[i]
            if i in taken or overlap(c.text, visible) > p.max_overlap:
                continue
            cost = cost_of(i)
            if used + cost > cap:
                continue
            used += cost
            taken.add(i)
            hits.append(Hit(c, round(score, 4)))
    while hits and counter.text(render(hits)) > p.max_tokens:
        hits.pop()  # headers and citations pushed the zone over budget: drop the lowest rank
    return hits


def _by_length(index: SessionIndex, candidates: list[tuple[int, float]], prior: float,
               cost_of: Callable[[int], int]) -> list[tuple[int, float]]:
    """``candidates`` in the order they fill the zone: a named speaker's turn shorter than
    ``PRIOR_TOKENS`` by its score times ``(tokens / PRIOR_TOKENS) ** prior`` (module
    docstring, step 5); a turn keeps the score it competed with. Only between named
    people: an assistant's long turns are its verbosity, not what it was told."""
    voices = index.voices
    if prior <= 0 or not voices:
        return candidates

    def weight(i: int) -> float:
        c = index.chunks[i]
        return min(1.0, cost_of(i) / PRIOR_TOKENS) ** prior if c.named and c.speaker in voices else 1.0

    return sorted(candidates, key=lambda kv: (-kv[1] * weight(kv[0]), kv[0]))


def _candidates(index: SessionIndex, scores: np.ndarray, p: SearchParams) -> list[tuple[int, float]]:
    """Chunks with the score they compete with: their own for seeds, else the best
    ``seed score * neighbour_decay ** distance`` (in turns) of a seed near them."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    seeds = [i for i in order[: p.top_k] if scores[i] >= p.threshold]
    by_turn: dict[int, list[int]] = {}
    for i, c in enumerate(index.chunks):
        by_turn.setdefault(c.index, []).append(i)
    turns = sorted(by_turn)
    pos = {t: k for k, t in enumerate(turns)}
    best: dict[int, float] = {}
    for i in seeds:
        best[i] = max(best.get(i, 0.0), float(scores[i]))
        k = pos[index.chunks[i].index]
        for j in range(max(0, k - p.neighbours), min(len(turns), k + p.neighbours + 1)):
            near = float(scores[i]) * p.neighbour_decay ** abs(j - k)
            for n in by_turn[turns[j]]:
                if n != i and near > best.get(n, 0.0):
                    best[n] = near
    return sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))


def cite(c: Chunk) -> str:
    """``#12 Caroline: …`` when the text names its speaker, else ``#12 user: …`` (role
    and tool name)."""
    text = quote_role_labels(c.text)  # a snippet never opens as "System: …"
    if c.named:
        return f"#{c.index} {text}"
    who = f"{c.role} {c.tool}".strip() if c.tool else c.role
    return f"#{c.index} {who}: {text}"


def _line(h: Hit) -> str:
    return f"{cite(h.chunk)} {h.note}" if h.note else cite(h.chunk)


def _zone_order(h: Hit) -> tuple[bool, str, int, str]:
    """Conversation turns in order first, then knowledge clauses by document."""
    kb = h.chunk.role == "knowledge"
    return kb, h.chunk.header.split(" §")[0] if kb else "", h.chunk.index, h.chunk.text


def render(hits: list[Hit]) -> str:
    """The zone text: header line, intro, then snippets in order under their headers."""
    kinds = {h.chunk.role == "knowledge" for h in hits}
    lines = [MEMORY_HEADER, BOTH_INTRO if len(kinds) == 2 else KB_INTRO if True in kinds else ZONE_INTRO]
    header = None
    for h in sorted(hits, key=_zone_order):
        if h.chunk.header != header and h.chunk.header:
            lines.append(h.chunk.header)
        header = h.chunk.header
        lines.append(_line(h))
    return "\n".join(lines)
