"""FastAPI's English documentation as a small web: pages by public URL, BM25 search.

Each ``docs/en/docs/**.md`` page is served at its public address on
fastapi.tiangolo.com (``tutorial/body.md`` -> ``/tutorial/body/``) with relative links
made absolute and ``{* docs_src/... *}`` includes replaced by the example's code, as the
rendered site shows it. ``search`` ranks pages with BM25 over title and text.
"""

from __future__ import annotations

import math
import posixpath
import re
from collections import Counter
from dataclasses import dataclass, field

from context_engine.bench.long_tools.sources import Mirror, Source

ROOT = "docs/en/docs/"
SITE = "https://fastapi.tiangolo.com/"
LINK = re.compile(r"\]\(([^)\s]+)\)")
INCLUDE = re.compile(r"\{\* \.\./\.\./(docs_src/[^\s*]+)[^*]*\*\}")
WORD = re.compile(r"[a-z0-9_]+")
K1, B = 1.2, 0.75


def url_of(path: str) -> str:
    rel = path[len(ROOT):]
    rel = rel[: -len("index.md")] if rel.endswith("index.md") else rel[:-3] + "/"
    return SITE + rel


@dataclass(frozen=True)
class Page:
    url: str
    title: str
    text: str
    words: Counter[str] = field(compare=False)


def _absolute(path: str, text: str) -> str:
    def fix(m: re.Match[str]) -> str:
        target = m.group(1)
        if "://" in target or target.startswith(("#", "mailto:")):
            return m.group(0)
        ref, _, anchor = target.partition("#")
        if not ref.endswith(".md"):
            return m.group(0)
        full = posixpath.normpath(posixpath.join(posixpath.dirname(path), ref))
        return "](" + url_of(full) + ("#" + anchor if anchor else "") + ")"
    return LINK.sub(fix, text)


def _inline(mirror: Mirror, text: str, known: set[str]) -> str:
    def code(m: re.Match[str]) -> str:
        src = m.group(1)
        return f"```python\n{mirror.read(src).rstrip()}\n```" if src in known else m.group(0)
    return INCLUDE.sub(code, text)


@dataclass(frozen=True)
class Corpus:
    pages: dict[str, Page]
    df: Counter[str]
    avg_len: float

    def search(self, query: str, k: int = 6) -> list[Page]:
        terms = WORD.findall(query.lower())
        n = len(self.pages)
        scored = []
        for page in self.pages.values():
            length = sum(page.words.values())
            s = 0.0
            for t in terms:
                tf = page.words.get(t, 0)
                if tf:
                    idf = math.log(1 + (n - self.df[t] + 0.5) / (self.df[t] + 0.5))
                    s += idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / self.avg_len))
            if s > 0:
                scored.append((-s, page.url, page))
        return [p for _, _, p in sorted(scored)[:k]]


def snippet(page: Page, query: str, width: int = 240) -> str:
    """The paragraph sharing most words with the query, cut to ``width`` characters."""
    terms = set(WORD.findall(query.lower()))
    paras = [p.strip() for p in page.text.split("\n\n") if p.strip() and not p.startswith(("#", "```", "{*"))]
    best = max(paras, key=lambda p: (len(terms & set(WORD.findall(p.lower()))), -paras.index(p)), default="")
    best = " ".join(best.split())
    return best if len(best) <= width else best[: width - 3].rsplit(" ", 1)[0] + "..."


def load_corpus(mirror: Mirror) -> tuple[Corpus, list[Source]]:
    paths = [p for p in mirror.files(ROOT) if p.endswith(".md") and "release-notes" not in p]
    known = set(mirror.files("docs_src"))
    pages = {}
    for path in paths:
        text = _inline(mirror, _absolute(path, mirror.read(path)), known)
        head = next((ln for ln in text.splitlines() if ln.startswith("# ")), "# " + path)
        title = re.sub(r"\s*\{ #[^}]*\}\s*$", "", head[2:]).strip()
        pages[url_of(path)] = Page(url_of(path), title, text, Counter(WORD.findall((title + " " + text).lower())))
    df: Counter[str] = Counter()
    for page in pages.values():
        df.update(set(page.words))
    avg = sum(sum(p.words.values()) for p in pages.values()) / max(1, len(pages))
    return Corpus(pages, df, avg), [mirror.source(ROOT + "**/*.md"), mirror.source("docs_src/**/*.py")]
