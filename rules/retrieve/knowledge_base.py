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
modification time and size). ``context-engine kb`` builds the same index from the
command line: it reports each document's status and embeds every clause into the
configured store, so the server's next rebuild finds them cached. A search returns at
most ``max_clauses`` clauses that pass the relevance threshold. A file that cannot be
read or parsed is skipped (and logged), never fatal at run time.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import yaml

from context_engine.proxy.engine.tokens import TokenCounter
from context_engine.rules.retrieve.index import Chunk, EmbeddingCache, SessionIndex
from context_engine.rules.retrieve.query import terms
from context_engine.rules.retrieve.search import Hit, SearchParams, fused_scores

log = logging.getLogger("context_engine.knowledge")
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


def read_documents(paths: list[str]) -> tuple[list[Document], dict[str, str]]:
    """The documents at ``paths``, and the error of each one that could not be read."""
    docs, errors = [], {}
    for path in paths:
        try:
            doc = _read(path)
        except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError) as exc:
            errors[path] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            continue
        if doc is None:
            errors[path] = "not a mapping with metadata and content"
        else:
            docs.append(doc)
    return docs, errors


def _date(value: Any, default: dt.date) -> dt.date:
    if isinstance(value, dt.date):
        return value
    try:
        return dt.date.fromisoformat(str(value)[:10]) if value else default
    except ValueError:
        return default


def valid_documents(docs: list[Document], today: dt.date) -> list[Document]:
    """Drop expired or not-yet-valid documents, then resolve conflict groups."""
    status = statuses(docs, today)
    return [d for d in _ordered(docs, status) if status[d.path] == "valid"]


def _priority(d: Document) -> tuple[float, dt.date]:
    try:
        priority = float(d.meta.get("source_priority") or 0)
    except (TypeError, ValueError):
        priority = 0.0
    return priority, _date(d.meta.get("valid_from"), dt.date.min)


def statuses(docs: list[Document], today: dt.date) -> dict[str, str]:
    """Each document's status on ``today``: ``valid``, ``expired on …``, ``valid from …``
    or ``superseded by … (conflict group …)``."""
    out: dict[str, str] = {}
    best: dict[str, Document] = {}
    for d in sorted(docs, key=lambda d: d.path):
        start = _date(d.meta.get("valid_from"), dt.date.min)
        end = _date(d.meta.get("valid_to"), dt.date.max)
        if today < start:
            out[d.path] = f"valid from {start.isoformat()}"
        elif today > end:
            out[d.path] = f"expired on {end.isoformat()}"
        else:
            out[d.path] = "valid"
            group = str(d.meta.get("conflict_group") or "")
            if group and (group not in best or _priority(d) > _priority(best[group])):
                best[group] = d
    for d in docs:
        group = str(d.meta.get("conflict_group") or "")
        if out[d.path] == "valid" and group and best[group] is not d:
            out[d.path] = f"superseded by {best[group].path} (conflict group {group})"
    return out


def _ordered(docs: list[Document], status: dict[str, str]) -> list[Document]:
    """Documents without a conflict group by path, then each group's survivor by group."""
    loose = sorted((d for d in docs if not d.meta.get("conflict_group")), key=lambda d: d.path)
    grouped = sorted((d for d in docs if d.meta.get("conflict_group") and status[d.path] == "valid"),
                     key=lambda d: str(d.meta.get("conflict_group")))
    return loose + grouped


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
        self.documents: list[Document] = []
        self.errors: dict[str, str] = {}
        self.lock = threading.Lock()

    @classmethod
    def load(cls, folder: str, cache: EmbeddingCache, date: str = "") -> KnowledgeBase:
        today = dt.date.fromisoformat(date) if date else dt.date.today()
        kb = cls(folder, cache, today)
        kb.rebuild()
        return kb

    def rebuild(self) -> int:
        """(Re)index the folder; returns the number of clauses."""
        self.signature = _signature(self.folder)
        docs, errors = read_documents([p for p, _, _ in self.signature])
        for path, error in sorted(errors.items()):
            log.warning("knowledge base: skipped %s: %s", path, error)
        self.documents, self.errors = docs, errors
        chunks = []
        for d in valid_documents(docs, self.today):
            name = os.path.relpath(d.path, self.folder)
            scenario = str(d.meta.get("applicable_scenario") or "")
            for n, text in enumerate(clauses(d.content), 1):
                header = f"[knowledge {name} §{n}{', ' + scenario if scenario else ''}]"
                chunks.append(Chunk(n, "knowledge", text, header))
        index = SessionIndex("kb:" + self.folder, self.cache)
        index.sync(chunks)
        index.vectorize()  # the whole folder, at start-up or when it changed
        self.index = index
        return len(chunks)

    def search(self, query: str, embed: Callable[[list[str]], np.ndarray], p: SearchParams,
               counter: TokenCounter, budget: int) -> list[Hit]:
        with self.lock:  # one index for every session: rebuilt and searched one at a time
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
