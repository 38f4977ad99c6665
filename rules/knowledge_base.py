"""An optional knowledge base for ``retrieve``: a folder of documents with metadata.

Each document (``.md`` with a YAML front matter block, or ``.json`` / ``.yaml`` with a
``metadata`` mapping and a ``content`` string) carries:

- ``valid_from`` / ``valid_to`` (ISO dates, optional): outside them the document is
  filtered out before ranking;
- ``applicable_scenario`` (optional): added to every clause's searchable text;
- ``conflict_group`` (optional): among valid documents of one group only the highest
  ``source_priority`` (then the newest ``valid_from``, then the path) survives;
- ``source_priority`` (number, default 0).

Content is cut into numbered clauses (paragraphs or list items, about 120 words each)
and indexed once; the index is rebuilt when a file changes (checked per search by
modification time and size) or by calling ``load`` again (CLI). A search returns at
most ``max_clauses`` clauses that pass the relevance threshold.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import yaml

from proxy.tokens import TokenCounter
from rules.memory_index import Chunk, EmbeddingCache, SessionIndex
from rules.memory_search import Hit, SearchParams, fused_scores
from rules.query_analysis import terms

SUFFIXES = (".md", ".markdown", ".json", ".yaml", ".yml")
CLAUSE_WORDS = 120
MAX_CLAUSES = 6


@dataclass(frozen=True)
class Document:
    path: str
    meta: dict[str, Any]
    content: str


def _read(path: str) -> Document | None:
    with open(path, encoding="utf-8") as fh:
        raw = fh.read()
    if path.endswith((".md", ".markdown")):
        found = re.match(r"^---\s*\n(.*?)\n---\s*\n?(.*)$", raw, re.DOTALL)
        meta = yaml.safe_load(found.group(1)) if found else {}
        return Document(path, meta if isinstance(meta, dict) else {}, found.group(2) if found else raw)
    data = json.loads(raw) if path.endswith(".json") else yaml.safe_load(raw)
    if not isinstance(data, dict):
        return None
    meta = data.get("metadata") or {}
    return Document(path, meta if isinstance(meta, dict) else {}, str(data.get("content", "")))


def _date(value: Any, default: dt.date) -> dt.date:
    if isinstance(value, dt.date):
        return value
    try:
        return dt.date.fromisoformat(str(value)[:10]) if value else default
    except ValueError:
        return default


def valid_documents(docs: list[Document], today: dt.date) -> list[Document]:
    """Drop expired or not-yet-valid documents, then resolve conflict groups."""
    live = [d for d in docs if _date(d.meta.get("valid_from"), dt.date.min) <= today
            <= _date(d.meta.get("valid_to"), dt.date.max)]
    best: dict[str, Document] = {}
    out = []
    for d in sorted(live, key=lambda d: d.path):
        group = str(d.meta.get("conflict_group") or "")
        if not group:
            out.append(d)
            continue
        rank = (float(d.meta.get("source_priority") or 0), _date(d.meta.get("valid_from"), dt.date.min))
        cur = best.get(group)
        if cur is None or rank > (float(cur.meta.get("source_priority") or 0),
                                  _date(cur.meta.get("valid_from"), dt.date.min)):
            best[group] = d
    return out + [best[g] for g in sorted(best)]


def clauses(text: str) -> list[str]:
    """Paragraphs / list items, each cut to about ``CLAUSE_WORDS`` words."""
    parts = [p.strip() for p in re.split(r"\n\s*\n|\n(?=\s*(?:[-*+]|\d+[.)])\s)", text) if p.strip()]
    out = []
    for p in parts:
        words = p.split()
        out += [" ".join(words[i:i + CLAUSE_WORDS]) for i in range(0, len(words), CLAUSE_WORDS)]
    return out


def _signature(folder: str) -> tuple[tuple[str, float, int], ...]:
    rows = []
    for root, _, files in os.walk(folder):
        for name in sorted(files):
            if name.endswith(SUFFIXES):
                st = os.stat(os.path.join(root, name))
                rows.append((os.path.join(root, name), st.st_mtime, st.st_size))
    return tuple(sorted(rows))


class KnowledgeBase:
    """Clauses of the valid documents of a folder, indexed like a session's memory."""

    def __init__(self, folder: str, cache: EmbeddingCache, today: dt.date) -> None:
        self.folder, self.cache, self.today = folder, cache, today
        self.signature: tuple[tuple[str, float, int], ...] = ()
        self.index = SessionIndex("kb:" + folder, cache)

    @classmethod
    def load(cls, folder: str, cache: EmbeddingCache, date: str = "") -> KnowledgeBase:
        today = dt.date.fromisoformat(date) if date else dt.date.today()
        kb = cls(folder, cache, today)
        kb.rebuild()
        return kb

    def rebuild(self) -> int:
        """(Re)index the folder; returns the number of clauses."""
        self.signature = _signature(self.folder)
        docs = [d for d in (_read(p) for p, _, _ in self.signature) if d is not None]
        chunks = []
        for d in valid_documents(docs, self.today):
            name = os.path.relpath(d.path, self.folder)
            scenario = str(d.meta.get("applicable_scenario") or "")
            for n, text in enumerate(clauses(d.content), 1):
                header = f"[knowledge {name} §{n}{', ' + scenario if scenario else ''}]"
                chunks.append(Chunk(n, "knowledge", text, header))
        self.index = SessionIndex("kb:" + self.folder, self.cache)
        self.index.sync(chunks)
        return len(chunks)

    def search(self, query: str, embed: Callable[[list[str]], np.ndarray], p: SearchParams,
               counter: TokenCounter, budget: int) -> list[Hit]:
        if _signature(self.folder) != self.signature:
            self.rebuild()
        idx = self.index
        if not idx.chunks or not terms(query):
            return []
        scores = fused_scores(idx, query, embed, p)
        order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
        hits, used = [], 0
        for i in order[:MAX_CLAUSES]:
            cost = counter.text(idx.chunks[i].text) + 12
            if scores[i] < p.threshold or used + cost > budget:
                continue
            used += cost
            hits.append(Hit(idx.chunks[i], round(float(scores[i]), 4)))
        return hits
