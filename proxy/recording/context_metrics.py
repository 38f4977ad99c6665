"""Context metrics, computed after the response, off the request path.

- **Effective context utilization**: of the context tokens the request carried as data
  (tool results, summaries, retrieved memory), the share in lines the response drew
  on. A line counts as drawn on when it shares a word 3-gram with the response, or,
  for short lines, an id-like token (a word with a digit, ``_``, ``@`` or ``-``).
- **Context oscillation**: the share of this turn's injected snippets that were not
  injected on the session's previous turn (needs the retrieve rule's note).
- **Tool-call retries**: assistant tool calls identical (name and arguments) to the
  assistant tool call just before them in the history.
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from context_engine.proxy.engine.messages import MEMORY_HEADER, SUMMARY_HEADER, text_of

_WORD = re.compile(r"[\w@.\-]+", re.UNICODE)
_IDCHAR = re.compile(r"[\d_@]")


def _words(text: str) -> list[str]:
    return [w.casefold().strip(".-") for w in _WORD.findall(text) if w.strip(".-")]


def _grams(words: list[str]) -> set[tuple[str, ...]]:
    return {tuple(words[i:i + 3]) for i in range(len(words) - 2)}


def data_segments(messages: Iterable[Any]) -> list[str]:
    """The data the request carried: tool results, summaries and memory snippets."""
    out = []
    for m in messages:
        text = text_of(m)
        if m.get("role") == "tool" or text.lstrip().startswith((SUMMARY_HEADER, MEMORY_HEADER)):
            out.append(text)
    return out


def utilization(segments: list[str], response: str) -> float | None:
    """Share of data-line words in lines the response drew on; None without data."""
    if not segments or not response:
        return None
    resp_words = _words(response)
    resp_grams, resp_set = _grams(resp_words), set(resp_words)
    total = used = 0
    for seg in segments:
        for line in seg.splitlines():
            words = _words(line)
            if not words:
                continue
            total += len(words)
            if resp_set.isdisjoint(words):  # no shared word: no shared id or 3-gram either
                continue
            ids = {w.casefold() for w in _WORD.findall(line) if _IDCHAR.search(w)} & resp_set
            if ids or _grams(words) & resp_grams:
                used += len(words)
    return used / total if total else None


def tool_retries(messages: list[dict[str, Any]]) -> int:
    retries, previous = 0, None
    for m in messages:
        if m.get("role") != "assistant" or not m.get("tool_calls"):
            continue
        calls = tuple((c.get("function", {}).get("name"), c.get("function", {}).get("arguments"))
                      for c in m["tool_calls"])
        retries += calls == previous
        previous = calls
    return retries


class Oscillation:
    """Remembers each session's last injected snippets as 8-byte digests (bounded in
    sessions, least recent evicted, and in bytes per session)."""

    def __init__(self, max_sessions: int = 10_000) -> None:
        self._last: OrderedDict[str, frozenset[bytes]] = OrderedDict()
        self._max = max_sessions

    def observe(self, session: str, snippets: Iterable[str]) -> float | None:
        current = frozenset(hashlib.blake2b(s.encode("utf-8", "surrogatepass"), digest_size=8).digest()
                            for s in snippets)
        previous = self._last.pop(session, None)
        self._last[session] = current
        if len(self._last) > self._max:
            self._last.popitem(last=False)
        if not current:
            return None
        return len(current - (previous or frozenset())) / len(current)
