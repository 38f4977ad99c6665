"""What every wire-format adapter shares: the neutral form and raw-byte splicing.

The neutral form is the chat-completions message list the rules already understand.
An adapter maps each wire *container* (a Responses item run, an Anthropic message) to
one or more neutral messages, tagged with ``SRC`` (the container's index) and, when the
container holds items the rules must not touch, ``OPAQUE`` (those items, for the
invariant check). When splicing, a container is a list of *units* with their exact text:

    content   text/image parts of the container's main message
    call      a tool call (key: its id)
    result    a tool result (key: the call id it answers)
    opaque    anything else: reasoning, thinking, compaction, unknown types

On the way back each container whose neutral messages came back unchanged is written
as its original text; a changed one is rebuilt unit by unit, opaque units as their
original text at their original place.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from context_engine.proxy.dialects.jsonspan import array_spans
from context_engine.proxy.engine.opaque import SRC

SYSTEM = -1  # the SRC of a leading system message read from a field of its own


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


@dataclass(slots=True)
class Unit:
    """One item or block with its exact text (units are only built when splicing)."""

    kind: str  # content | call | result | opaque
    obj: Any
    key: str = ""
    raw: str = ""


@dataclass(slots=True)
class Container:
    units: list[Unit]
    messages: list[dict[str, Any]]  # its neutral messages
    obj: Any = None
    raw: str = ""  # its exact text, filled when splicing
    bounds: tuple[int, int] = (0, 0)


def join_pieces(text: str, containers: list[Container], pieces: list[tuple[int | None, str]],
                begin: int, end: int) -> str:
    """A JSON array of ``pieces`` (``(src, text)``; ``src`` set when it is a container's
    exact text). Between two adjacent containers the original separator is kept, so an
    unchanged array comes out byte for byte."""
    if not pieces:
        return "[]"
    last = len(containers) - 1
    out = [text[begin:containers[0].bounds[0]] if pieces[0][0] == 0 else "["]
    prev: int | None = None
    for n, (src, piece) in enumerate(pieces):
        if n:
            if src is not None and prev is not None and src == prev + 1:
                out.append(text[containers[prev].bounds[1]:containers[src].bounds[0]])
            else:
                out.append(",")
        out.append(piece)
        prev = src
    out.append(text[containers[last].bounds[1]:end] if pieces[-1][0] == last else "]")
    return "".join(out)


@dataclass
class Group:
    """Consecutive neutral messages of one container (``src`` None: a rule's new message)."""

    src: int | None
    messages: list[dict[str, Any]]

    @property
    def main(self) -> dict[str, Any] | None:
        return next((m for m in self.messages if m.get("role") != "tool"), None)

    def results(self) -> dict[str, dict[str, Any]]:
        return {str(m.get("tool_call_id")): m for m in self.messages if m.get("role") == "tool"}


def containers_of(text: str, start: int, objs: list[Any],
                  messages: list[dict[str, Any]]) -> list[Container]:
    """One container per element of the JSON array at ``start`` (``objs``, decoded), with
    its neutral messages, exact text and bounds (its units are the dialect's to fill)."""
    spans = array_spans(text, start)
    of: list[list[dict[str, Any]]] = [[] for _ in spans]
    for m in messages:
        if m[SRC] != SYSTEM:
            of[m[SRC]].append(m)
    out = [Container([], of[n], obj) for n, obj in enumerate(objs)]
    for c, (b, e) in zip(out, spans):
        c.bounds, c.raw = (b, e), text[b:e]
    return out


def changed_system(gs: list[Group], sent: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The rewritten system message, when the request had one (its group is taken off
    ``gs``) and a rule changed it; ``ValueError`` when it was removed or reshaped."""
    if not sent or sent[0].get(SRC) != SYSTEM:
        return None
    first = gs.pop(0) if gs and gs[0].src == SYSTEM else None
    if first is None or len(first.messages) != 1:
        raise ValueError("the system prompt was removed or reshaped")
    return first.messages[0] if first.messages[0] != sent[0] else None


def groups(messages: list[Any]) -> list[Group]:
    out: list[Group] = []
    for m in messages:
        src = m.get(SRC) if isinstance(m, dict) else None
        if src is not None and out and out[-1].src == src:
            out[-1].messages.append(m)
        else:
            out.append(Group(src if isinstance(src, int) else None, [m]))
    return out


def first_by_id(calls: Any) -> dict[str, dict[str, Any]]:
    """Each string id's first call, in one pass."""
    out: dict[str, dict[str, Any]] = {}
    for c in calls or ():
        if isinstance(c, dict) and isinstance(c.get("id"), str):
            out.setdefault(c["id"], c)
    return out


class Pending:
    """A message's calls not placed yet: ``take(id)`` hands out the first one left with
    that id, in O(1) (no scan of the list per call); ``rest`` the others, in order."""

    def __init__(self, calls: list[Any]) -> None:
        self.calls = calls
        self.used = [False] * len(calls)
        self.by_id: dict[str, deque[int]] = {}
        for n, c in enumerate(calls):
            if isinstance(c, dict) and isinstance(c.get("id"), str):
                self.by_id.setdefault(c["id"], deque()).append(n)

    def take(self, key: str) -> dict[str, Any] | None:
        left = self.by_id.get(key)
        if not left:
            return None
        n = left.popleft()
        self.used[n] = True
        call: dict[str, Any] = self.calls[n]
        return call

    def rest(self) -> list[Any]:
        return [c for c, used in zip(self.calls, self.used) if not used]


def same_raw(units: list[Unit]) -> Callable[[Any], str | None]:
    """A lookup of the original text of a unit whose object equals a given one (the
    first such unit), by a canonical key: one pass over ``units``, O(1) per look-up,
    so a turn of n unchanged parts is written back in O(n), not O(n²)."""
    index: dict[str, Unit] = {}
    for u in units:
        index.setdefault(_canonical(u.obj), u)

    def find(obj: Any) -> str | None:
        u = index.get(_canonical(obj))
        return u.raw if u is not None and u.obj == obj else None

    return find


def _canonical(obj: Any) -> str:
    try:
        return json.dumps(obj, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):  # not JSON (a rule's odd value): matches nothing
        return f"\x00{id(obj)}"


Build = Callable[[Unit, dict[str, Any]], str]


def rebuild_units(c: Container, g: Group, content: Callable[[dict[str, Any]], list[str]],
                  patch_call: Build, patch_result: Build, new_call: Callable[[dict[str, Any]], str]
                  ) -> list[str]:
    """The unit texts of container ``c`` as group ``g`` (its messages after the rules) says.

    Unchanged units keep their text; opaque units go out as they came, if the group holds
    the container's main message; the main message's new content replaces its content
    units at the first one's place; calls and results are kept, patched or dropped by id
    (looked up in dicts: linear in the units).
    """
    orig_main = next((m for m in c.messages if m.get("role") != "tool"), None)
    orig_results = {str(m.get("tool_call_id")): m for m in c.messages if m.get("role") == "tool"}
    orig_calls = first_by_id((orig_main or {}).get("tool_calls"))
    main, results = g.main, g.results()
    same_content = main is not None and orig_main is not None and \
        main.get("content") == orig_main.get("content")
    out: list[str] = []
    placed = False
    first_call = -1
    calls = Pending(list((main or {}).get("tool_calls") or ()))
    for u in c.units:
        if u.kind == "opaque":
            if main is not None:
                out.append(u.raw)
        elif u.kind == "content":
            if main is None:
                continue
            if same_content:
                out.append(u.raw)
            elif not placed:
                out.extend(content(main))
                placed = True
        elif u.kind == "call":
            first_call = len(out) if first_call < 0 else first_call
            new = calls.take(u.key)
            if new is None:
                continue
            out.append(u.raw if new == orig_calls.get(u.key) else patch_call(u, new))
        elif u.kind == "result":
            res = results.get(u.key)
            if res is None:
                continue
            out.append(u.raw if res == orig_results.get(u.key) else patch_result(u, res))
    if main is not None and not same_content and not placed:
        at = first_call if first_call >= 0 else len(out)
        out[at:at] = content(main)
    out.extend(new_call(call) for call in calls.rest())
    return out


def plain_text(content: Any, kinds: tuple[str, ...]) -> Any:
    """``content`` as its string when it is a list of one text part with no other key
    (the rules handle strings as chat clients send them); else ``content`` itself. A
    changed string is written back as such a part, so nothing is lost."""
    if isinstance(content, list) and len(content) == 1:
        part = content[0]
        if (isinstance(part, dict) and len(part) == 2 and part.get("type") in kinds
                and isinstance(part.get("text"), str)):
            return part["text"]
    return content


def text_parts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content] if content else []
    return [p["text"] for p in content or () if isinstance(p, dict) and isinstance(p.get("text"), str)]


def neutral_body(model: Any, messages: list[dict[str, Any]], tools: Any,
                 max_tokens: Any) -> dict[str, Any]:
    """The chat-shaped dict the engine rewrites and counts."""
    body: dict[str, Any] = {"model": model if isinstance(model, str) else "", "messages": messages}
    if isinstance(tools, list):
        body["tools"] = tools
    if isinstance(max_tokens, int):
        body["max_tokens"] = max_tokens
    return body


@dataclass
class Parsed:
    """A request as an adapter read it: the client's body, its neutral view and a splicer."""

    data: dict[str, Any]
    chat: dict[str, Any]
    stream: bool
    splice: Callable[[list[Any]], bytes]
    notes: dict[str, Any] = field(default_factory=dict)
    rewritable: bool = True  # false: the body goes out as sent (lone surrogates)
    # more neutral messages than the ``max_items`` the parse was given: ``chat`` holds only
    # the head (``HEAD``), read for the session id; the rest was never translated
    over: bool = False


HEAD = 64  # containers read of a request over the message cap (its first turns)
INSTRUCTIONS = ("system", "developer")  # the roles a session id reads besides "user"


def head_read(messages: list[dict[str, Any]], n: int, following: Any) -> bool:
    """Whether an over-cap request's first ``n`` containers (``messages``, translated)
    are enough: they hold its first user and instruction messages, or ``n`` is ``HEAD``,
    or the next container holds more than ``HEAD`` parts (``following``: its parts)."""
    roles = {m.get("role") for m in messages}
    return n >= HEAD or (isinstance(following, list) and len(following) > HEAD) or (
        "user" in roles and not roles.isdisjoint(INSTRUCTIONS))
