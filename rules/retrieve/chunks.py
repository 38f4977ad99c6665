"""Chunks of a conversation, each with where it came from.

``chunk_messages``: one chunk per turn; a long tool result is cut by records (lines or
JSON array items) into pieces of at most ``max_chunk_chars``. Each chunk keeps its
provenance: message index, role, the session/date header in force ("[Session 3, 1:14
pm on 25 May, 2023]") and the tool name, so an injected snippet carries time and source.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from context_engine.proxy.engine.messages import SPEAKER, call_index, is_injected, text_of
from context_engine.rules.retrieve.query import SESSION as _SESSION


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
                   skip_injected: bool = False, keep: frozenset[int] = frozenset(),
                   context_chars: int = 0) -> list[Chunk]:
    """Chunks of ``messages[start:end]`` but ``keep`` (and, with ``skip_injected``, the
    summaries and memory zones rules put in: ``is_injected``); headers are tracked from
    index 0.

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
        if i < start or i in keep or not text.strip() or (skip_injected and is_injected(m)):
            continue
        body = text[found.end():] if found else text
        tool = names.get(str(m.get("tool_call_id", "")), "") if m.get("role") == "tool" else ""
        context = _context(texts, i, context_chars)
        for piece in _records(body, max_chunk_chars):
            out.append(Chunk(i, str(m.get("role", "")), piece, header, tool, context))
    return out
