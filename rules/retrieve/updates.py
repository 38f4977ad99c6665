"""Several snippets on one subject: the latest wins, and the zone says which it is.

"How often do I go to yoga?" may bring back "I attend yoga twice a week" from May and
"yoga three times a week" from November. The zone lists snippets in conversation order
under their session dates, so the latest comes last with its date; ``mark_updates``
also says so on each line: the question's subject is its rarest word that the memory
holds more than once, and when it occurs in what people said (user turns, or named
speakers' turns: not an assistant's reply) in two or more turns, the latest one is marked ``(latest on yoga)`` and each earlier one ``(earlier than #213 on yoga)``.
Nothing is dropped: a question about the earlier value ("before the 7/22 trip…") still
finds it. And when the window shows one statement on the subject while the memory holds
others (``unseen_subject``), the gate does not count the subject as seen: the window's
"yoga three times a week" does not answer "how often, and since when?" alone.
"""

from __future__ import annotations

import re
from dataclasses import replace

from context_engine.proxy.engine.tokens import TokenCounter
from context_engine.rules.retrieve.index import SessionIndex
from context_engine.rules.retrieve.query import TODAY, terms
from context_engine.rules.retrieve.search import Hit, render

_WORD = re.compile(r"[^\W\d_][\w'’&-]*")


def subject(index: SessionIndex, query: str, least: int = 2) -> tuple[str, str] | None:
    """``(term, word)``: the question's rarest word (of three letters or more) that at
    least ``least`` chunks hold, as a search term and as the question wrote it."""
    words: dict[str, str] = {}
    for word in _WORD.findall(TODAY.sub("", query.strip(), count=1)):
        found = terms(word)
        if len(found) == 1 and found[0].isalpha() and len(found[0]) >= 3:
            words.setdefault(found[0], word)
    held = [t for t in words if index.frequency(t) >= least]
    if not held:
        return None
    term = min(held, key=lambda t: (index.frequency(t), t))
    return term, words[term]


def _said(role: str, named: bool) -> bool:
    """A statement of a person: a user turn, or a named speaker's ("Caroline: …"); not an
    assistant's reply, a tool's output or a knowledge clause."""
    return role == "user" or named and role == "assistant"


def mark_updates(hits: list[Hit], index: SessionIndex, query: str, counter: TokenCounter,
                 budget: int) -> list[Hit]:
    """``hits`` with the latest and the earlier statements on the question's subject
    marked (module docstring), within ``budget`` tokens (the marks may push the zone
    over: the lowest-ranked hits go); unchanged when fewer than two turns mention it."""
    found = subject(index, query)
    if found is None:
        return hits
    term, word = found
    about = {h.chunk.index for h in hits if _said(h.chunk.role, h.chunk.named) and term in terms(h.chunk.text)}
    if len(about) < 2:
        return hits
    latest = max(about)
    marked = [replace(h, note=f"(latest on {word})" if h.chunk.index == latest
                      else f"(earlier than #{latest} on {word})") if h.chunk.index in about else h
              for h in hits]
    while marked and counter.text(render(marked)) > budget:
        marked.pop()
    return marked


def unseen_subject(index: SessionIndex, query: str, visible: str) -> frozenset[str]:
    """The question's subject term when the memory holds a statement on it that the
    ``visible`` text does not show: the window may show one statement ("yoga three times a
    week") and the question need the others too (the gate then does not count the term
    as seen)."""
    found = subject(index, query, least=1)
    if found is None:
        return frozenset()
    term = found[0]
    hidden = any(term in terms(c.text) and c.text not in visible for c in index.chunks
                 if _said(c.role, c.named))
    return frozenset({term}) if hidden else frozenset()

