"""Web research over FastAPI's documentation (MIT): search, fetch, follow links, report.

``web_search`` returns a pretty-printed JSON list of {title, url, snippet};
``fetch_url`` returns the page's markdown cut at 20,000 characters like real fetch
tools. The scripted researcher works through several sub-questions: it searches, fetches
the best hits, follows links found on pages it fetched earlier, saves notes that cite
URLs and identifiers (function and parameter names, versions) from those pages, and ends
with a ``write_report`` that cites URLs and facts from results many calls back.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from typing import Any

from context_engine.bench.long_tools.recorder import Recorder, ToolError, dump
from context_engine.bench.long_tools.sources import FASTAPI, Mirror, Source
from context_engine.bench.long_tools.web_corpus import SITE, Corpus, load_corpus, snippet

__all__ = ["FASTAPI", "load", "session"]
LIMIT = 20_000
BUDGETS = (160_000, 240_000, 330_000, 420_000)  # characters of history: ~40k-105k tokens
CODE = re.compile(r"`([A-Za-z_][\w.]*(?:\(\))?)`")
URL = re.compile(r"\]\((" + re.escape(SITE) + r"[^)#\s]*)")
SYSTEM = ("You are a research assistant with web access. Search, read the sources, keep notes with "
          "citations, and write a report that cites the exact pages and API names you relied on.")


def _fn(name: str, description: str, props: dict[str, str]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": {k: {"type": "string", "description": v} for k, v in props.items()},
        "required": sorted(props)}}}


TOOLS = [
    _fn("web_search", "Search the web. Returns a JSON list of results with title, url and snippet.",
        {"query": "The search query."}),
    _fn("fetch_url", "Fetch a URL and return its content as markdown (truncated to 20,000 characters).",
        {"url": "The absolute URL to fetch."}),
    _fn("save_note", "Save a research note for later.", {"title": "Short title.", "content": "The note, with sources."}),
    _fn("write_report", "Write the final report for the user.", {"title": "Report title.", "body": "Markdown body."}),
]


@dataclass
class WebEnv:
    corpus: Corpus
    notes: list[str] = field(default_factory=list)

    def run(self, name: str, args: dict[str, Any]) -> str:
        if name == "web_search":
            hits = self.corpus.search(args["query"])
            return dump([{"title": p.title, "url": p.url, "snippet": snippet(p, args["query"])} for p in hits], True)
        if name == "fetch_url":
            page = self.corpus.pages.get(args["url"])
            if page is None:
                raise ToolError(f"HTTP 404 Not Found for url {args['url']}")
            text = page.text
            if len(text) > LIMIT:
                text = text[:LIMIT] + f"\n\n[Content truncated: showing {LIMIT} of {len(page.text)} characters]"
            return text
        if name == "save_note":
            self.notes.append(args["title"])
            return dump({"saved": True, "note_id": f"note_{len(self.notes):03d}", "title": args["title"]}, False)
        return dump({"status": "written", "words": len(args["body"].split())}, False)


def load(mirror: Mirror) -> tuple[WebEnv, list[dict[str, Any]], list[Source]]:
    corpus, sources = load_corpus(mirror)
    return WebEnv(corpus), TOOLS, sources


def _facts(page: str, rng: random.Random, n: int) -> list[str]:
    names = sorted({m for m in CODE.findall(page) if "_" in m or "." in m or m.endswith("()")})
    return list(rng.sample(names, min(n, len(names))))


def _question(rec: Recorder, env: WebEnv, query: str, read: list[tuple[str, str]],
              seen: list[str]) -> tuple[str, list[str], list[str]]:
    """Search one sub-question, read 1-3 pages (one maybe via a link on an older page), note it."""
    unread = [u for u in seen_urls(rec)[:-6] if u not in dict(read)]
    if unread and rec.rng.random() < 0.35:  # open a hit an earlier search returned but that was skipped then
        url = rec.rng.choice(sorted(set(unread)))
        read.append((url, rec.call("fetch_url", {"url": url}, rec.maybe(0.6, "Going back to a result from an earlier search."))))
    hits = json.loads(rec.call("web_search", {"query": query}, rec.maybe(0.5, f"Searching: {query}.")))
    seen += [h["title"] for h in hits if h["title"] not in seen]
    urls = [h["url"] for h in hits if h["url"] not in dict(read)][: rec.rng.randint(1, 2)]
    if urls and rec.rng.random() < 0.15:  # a real slip: the address without its trailing slash
        rec.call("fetch_url", {"url": urls[0].rstrip("/")})
    pages = rec.fan_out([("fetch_url", {"url": u}) for u in urls], width=2)
    read += list(zip(urls, pages))
    older = [(u, p) for u, p in read[:-len(urls) or None] if URL.search(p)]
    if older and rec.rng.random() < 0.7:  # follow a link found on a page read earlier
        links = sorted({u for u in URL.findall(rec.rng.choice(older)[1]) if u not in dict(read)})
        if links:
            link = rec.rng.choice(links)
            read.append((link, rec.call("fetch_url", {"url": link}, rec.maybe(0.5, "That page links to a relevant section."))))
            urls.append(link)
    if not urls:
        return query, [], []
    facts = [f for u in urls for f in _facts(dict(read)[u], rec.rng, 2)]
    cited = urls + facts
    note = f"{query}\n" + "\n".join(f"- `{f}`" for f in facts) + "\nSources: " + ", ".join(urls)
    rec.call("save_note", {"title": query[:60], "content": note})
    return query, urls, cited


def seen_urls(rec: Recorder) -> list[str]:
    """The URLs of all search hits so far, oldest first."""
    out = []
    for m in rec.messages:
        if m["role"] == "tool" and m["content"].startswith("["):
            out += [h["url"] for h in json.loads(m["content"])]
    return out


def session(rec: Recorder, env: WebEnv, with_system: bool) -> None:
    rng = rec.rng
    rec.env = env = WebEnv(env.corpus)
    titles = sorted({p.title for p in env.corpus.pages.values() if len(p.title) > 8})
    topic = rng.sample(titles, 6)
    task = ("I'm writing an internal guide on building APIs with FastAPI. Research these topics and "
            "write me a report with the relevant functions, parameters and the exact doc pages:\n" +
            "\n".join(f"- {t}" for t in topic) +
            "\nAdd anything closely related you find along the way. Keep notes as you go and cite the pages you used.")
    rec.start(task, SYSTEM if with_system else None)
    read: list[tuple[str, str]] = []
    found: list[tuple[str, list[str], list[str]]] = []
    budget = rng.choice(BUDGETS)
    seen: list[str] = []  # titles of search hits, in the order they came back
    for n in range(40):
        if sum(len(str(m.get("content") or "")) for m in rec.messages) > budget:
            break
        # the task's topics first, then related pages that turned up in earlier searches
        older = [t for t in seen[: max(0, len(seen) - 6)] if f"fastapi {t.lower()}" not in {q for q, _, _ in found}]
        if n >= len(topic) and not older:
            break
        q = f"fastapi {(topic[n] if n < len(topic) else rng.choice(older)).lower()}"
        found.append(_question(rec, env, q, read, seen))
    for _ in range(rng.randint(1, 3)):  # re-open a page read long ago to check a detail
        url = rng.choice(read[: max(1, len(read) // 2)])[0]
        rec.call("fetch_url", {"url": url}, rec.maybe(0.7, "Re-checking a detail on a page I read earlier."))
    sections = [f"## {q}\n" + "\n".join(f"- {c}" if "://" in c else f"- `{c}`" for c in cited) for q, _, cited in found if cited]
    rec.call("write_report", {"title": "FastAPI building blocks", "body": "\n\n".join(sections)})
    rec.finish("The report is written; every section cites the pages it relies on.")
