"""Recall markers: every lossy spot of a rewrite names its id and how to get it back.

Runs after the rules, on the messages about to be sent (``Engine.rewrite``). It lines
the sent messages up with the client's (``align``): a sent message the client also sent
is kept, and so is one a rule rewrote in place under its own ``orig:`` id (``compact``'s
placeholder of a text turn); client turns with no counterpart left the request
(``retrieve``, ``budget``) or were folded into a summary (``summarize``).

- An ``orig:<id>`` a rule wrote (``tool_json`` cuts and stubs, ``budget`` stubs,
  summary tool lines) gains `` (context_recall)`` when the model can call the tool, or
  `` (no recall tool here)`` when the client sent no tools.
- Turns that left (at least ``min_gap_chars`` of them) are named once, in one line
  before the first gap: ``[context-engine:recall] turns from #a on are not all shown; …``.
  ``#n`` is the client's own message index, so a recall of ``#n`` returns that message.
  The line names where the gaps begin, not where they end: its text does not change as
  the session grows, so it never breaks the cached prefix by itself.

Only ids the rules emitted count: a client message that opens with an injected header
(``[context-engine:memory]``) is still the client's text, and an id the client's own text
names counts only as the id of content this request holds (a model reply that quoted a
marker, resent). Another caller's id a client writes down is text, never a recall key.

The markers are a function of the two message lists and of whether the tool is offered,
so the same request gives the same bytes (prompt caching).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from context_engine.proxy.engine.messages import INJECTED_ACK, REPEAT_REF, is_injected, text_of
from context_engine.proxy.engine.originals import PREFIX, REFERENCE, original_id

RECALL_HEADER = "[context-engine:recall]"
WITH_TOOL = " (context_recall)"
WITHOUT_TOOL = " (no recall tool here)"


@dataclass
class Marked:
    messages: list[Any]
    lossy: bool = False
    ids: list[str] = field(default_factory=list)  # orig:<id> markers in the sent request
    turns: tuple[int, int] | None = None  # first and last client turn not (all) shown
    hidden: list[int] = field(default_factory=list)  # client turns left out or rewritten


def _same(o: Any, r: Any) -> bool:
    if o is r or o == r:
        return True
    if not isinstance(o, dict) or not isinstance(r, dict) or o.get("role") != r.get("role"):
        return False
    if o.get("role") == "tool":
        return bool(o.get("tool_call_id")) and o.get("tool_call_id") == r.get("tool_call_id")
    calls_o, calls_r = o.get("tool_calls"), r.get("tool_calls")
    if calls_o and calls_r:
        return [c.get("id") for c in calls_o if isinstance(c, dict)] == \
            [c.get("id") for c in calls_r if isinstance(c, dict)]
    return text_of(o) == text_of(r) and bool(text_of(o))


def _in_place(o: Any, r: Any, ids: dict[int, str]) -> bool:
    """``r`` is ``o`` rewritten in place: the first line of ``r`` names ``o``'s own
    ``orig:`` id (``ids`` memoises it by ``id(o)``)."""
    head = text_of(r).split("\n", 1)[0]
    if PREFIX not in head or not isinstance(o, dict) or o.get("role") != r.get("role"):
        return False
    text = text_of(o)
    if not text:
        return False
    own = ids.setdefault(id(o), original_id(text)[len(PREFIX):])
    return own in REFERENCE.findall(head)


def _is_ack(sent: list[Any], i: int) -> bool:
    m = sent[i]
    return m.get("role") == "assistant" and m.get("content") == INJECTED_ACK and len(m) == 2


def _plain(m: Any) -> tuple[Any, str]:
    return m.get("role"), " ".join(text_of(m).casefold().split())


def _shown_before(o: Any, sent: list[Any], i: int) -> bool:
    """``sent[i]`` is ``fold_duplicates``' reference to an earlier copy of the client's
    ``o``, and the sent request still shows that copy: nothing of ``o`` is lost."""
    if not isinstance(o, dict) or o.get("role") != sent[i].get("role") or not text_of(o):
        return False
    want = _plain(o)
    return any(isinstance(m, dict) and _plain(m) == want for m in sent[:i])


def align(original: list[Any], sent: list[Any]) -> tuple[dict[int, int], list[tuple[int, int, int]]]:
    """Sent index → client index of the messages both hold; and the gaps: client spans
    ``[a, b)`` with no counterpart, each with the sent index it would stand before. A
    repeat folded into a reference to a copy shown earlier counts as held."""
    matched: dict[int, int] = {}
    gaps: list[tuple[int, int, int]] = []
    own = {id(m) for m in original}  # a client message under an injected header is its own
    ids: dict[int, str] = {}
    j = 0
    for i, r in enumerate(sent):
        if not isinstance(r, dict) or (is_injected(r) and id(r) not in own) or _is_ack(sent, i):
            continue
        ref = isinstance(r.get("content"), str) and r["content"].startswith(REPEAT_REF)
        k = next((k for k in range(j, len(original))
                  if _same(original[k], r) or (ref and _shown_before(original[k], sent, i))
                  or _in_place(original[k], r, ids)), None)
        if k is None:
            continue
        if k > j:
            gaps.append((j, k, i))
        matched[i] = k
        j = k + 1
    if j < len(original):
        gaps.append((j, len(original), len(sent)))
    return matched, gaps


def mark(original: list[Any], sent: list[Any], tools_on: bool, min_gap_chars: int) -> Marked:
    """The sent messages with recall markers (module docstring)."""
    matched, gaps = align(original, sent)
    suffix = WITH_TOOL if tools_on else WITHOUT_TOOL
    out = list(sent)
    ids: list[str] = []
    client = _ClientIds(original)
    for i, m in enumerate(sent):
        content = m.get("content") if isinstance(m, dict) else None
        text = _text(m) if isinstance(m, dict) else None
        if text is None or "orig:" not in text:
            continue
        before = original[matched[i]] if i in matched else None
        if before is not None and _text(before) == text:
            continue  # the client's own text
        known = set(REFERENCE.findall(text_of(before))) if before is not None else set()
        found = [h for h in REFERENCE.findall(text) if h not in known and client.emitted(h)]
        if not found:
            continue
        ids += ["orig:" + h for h in found if "orig:" + h not in ids]
        out[i] = {**m, "content": _suffixed(content, set(found), suffix)}
    shown = [g for g in gaps if sum(len(text_of(original[k])) for k in range(g[0], g[1])) >= min_gap_chars]
    turns = (shown[0][0], shown[-1][1] - 1) if shown else None
    if turns is not None:
        out = _insert(out, shown[0][2], _turns_line(turns, tools_on))
    hidden = sorted({k for a, b, _ in gaps for k in range(a, b)}
                    | {k for i, k in matched.items() if sent[i] != original[k]})
    return Marked(out, bool(ids) or turns is not None, ids, turns, hidden)


class _ClientIds:
    """The ``orig:`` ids the client's own text names, and the ids of the contents it
    sent; both computed on first use (most requests name no id of their own)."""

    def __init__(self, original: list[Any]) -> None:
        self.original = original
        self._named: set[str] | None = None
        self._held: set[str] | None = None

    def emitted(self, digest: str) -> bool:
        """Whether a rule may have written ``orig:<digest>``: the client's text does not
        name it, or it is the id of content the client sent in this request."""
        if self._named is None:
            texts = (text_of(m) for m in self.original if isinstance(m, dict))
            self._named = {h for t in texts if "orig:" in t for h in REFERENCE.findall(t)}
        if digest not in self._named:
            return True
        if self._held is None:
            self._held = {original_id(m["content"])[5:] for m in self.original
                          if isinstance(m, dict) and isinstance(m.get("content"), str)}
        return digest in self._held


def _text(m: dict[str, Any]) -> str | None:
    """The text of string content, or of content parts that are all text (a part carrying
    a cache breakpoint); None for anything else (``_suffixed`` rewrites these two)."""
    content = m.get("content")
    if isinstance(content, str) or (isinstance(content, list) and content and all(
            isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content)):
        return text_of(m)
    return None


def _suffixed(content: Any, found: set[str], suffix: str) -> Any:
    """``content`` (as ``_text`` reads it) with ``suffix`` after each id in ``found``."""
    if isinstance(content, list):
        return [{**p, "text": _suffixed(p["text"], found, suffix)} for p in content]
    return REFERENCE.sub(lambda g: g.group(0) + suffix if g.group(1) in found else g.group(0), content)


def _turns_line(turns: tuple[int, int], tools_on: bool) -> str:
    how = ('call context_recall with id "#n" (one turn) or a query to read them' if tools_on
           else "no recall tool here")
    return f"{RECALL_HEADER} turns from #{turns[0]} on are not all shown; {how}"


def _insert(out: list[Any], at: int, line: str) -> list[Any]:
    """``line`` as a user message before ``out[at]``; into an injected user message there
    (a summary) as its first line; an ack keeps two user messages apart."""
    nxt = out[at] if at < len(out) else None
    if nxt is not None and is_injected(nxt) and isinstance(nxt.get("content"), str):
        return out[:at] + [{**nxt, "content": line + "\n" + nxt["content"]}] + out[at + 1:]
    new: list[Any] = [{"role": "user", "content": line}]
    if at > 0 and out[at - 1].get("role") == "user":
        new.insert(0, {"role": "assistant", "content": INJECTED_ACK})
    if nxt is not None and nxt.get("role") == "user":
        new.append({"role": "assistant", "content": INJECTED_ACK})
    return out[:at] + new + out[at:]
