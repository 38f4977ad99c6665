"""What the recall loop needs from each API (``Wire``, a dialect's ``recall``), and what
the wires share.

The loop (``recall.loop``, ``recall.stream``) is written once; each dialect's wire
(``dialects/<api>/recall.py``) says how its tool looks, when a request may get it, where
a reply's calls and usage are, how the follow-up is built, how one streamed reply is
read (``Reader``) and how the follow-up's events continue the client's stream
(``Continuity``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from context_engine.proxy.dialects.jsonspan import object_spans
from context_engine.proxy.engine.recall_resolve import TOOL_NAME
from context_engine.proxy.engine.tokens import TokenCounter

DESCRIPTION = ("Return text the context proxy shortened or left out of this conversation: "
               "pass the id a marker names (orig:<id>, or #n for turn n), or a query to "
               "search the earlier turns.")
PARAMETERS: dict[str, Any] = {"type": "object", "properties": {
    "id": {"type": "string", "description": "an id from a marker: orig:<id> or #n"},
    "query": {"type": "string", "description": "words to search the earlier turns for"}}}


def compact(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


NEUTRAL_TOOL: dict[str, Any] = {"type": "function", "function": {
    "name": TOOL_NAME, "description": DESCRIPTION, "parameters": PARAMETERS}}


@functools.lru_cache(maxsize=8)
def tool_tokens(encoding: str) -> int:
    """What the definition adds to a request's input tokens (counted in the neutral
    form, as the engine counts every request)."""
    counter = TokenCounter(encoding)
    probe = [{"role": "user", "content": "x"}]
    other = [{"type": "function", "function": {"name": "x", "parameters": {"type": "object"}}}]
    return counter.request(probe, other + [NEUTRAL_TOOL]) - counter.request(probe, other)


@dataclass
class Call:
    """One ``context_recall`` call: its id and its arguments (a JSON string or a dict)."""

    id: str
    arguments: Any


@dataclass
class Turn:
    """One upstream reply as the loop reads it: the reply in its API's own shape (what
    the follow-up repeats), its recall calls and how many client calls it holds."""

    reply: Any
    calls: list[Call] = field(default_factory=list)
    others: int = 0


Round = tuple[Turn, list[str]]  # a reply with recall calls, and their results


@dataclass
class Hold:
    """The calls of one streamed reply by index: which are ``context_recall`` calls (the
    stream is held from the first one's start; the name comes first on every API), how
    many are the client's, and whether one of the client's began before any recall call
    (it went out: the reply can no longer be asked again)."""

    recall: set[int] = field(default_factory=set)
    client_calls: int = 0
    client_first: bool = False

    def begins(self, index: int, name: str) -> bool:
        """A call starts; True when it is a recall call."""
        if name == TOOL_NAME:
            self.recall.add(index)
            return True
        self.client_calls += 1
        self.client_first = self.client_first or not self.recall
        return False

    def index(self, index: int) -> int | None:
        """Where the client sees the call or item at ``index`` when the recall calls are
        left out (None: it is one)."""
        if index in self.recall:
            return None
        return index - sum(1 for i in self.recall if i < index)


class Reader(Protocol):
    """One streamed reply, event by event."""

    usage: dict[str, Any] | None  # the reply's usage object so far, in its API's shape
    hold: Hold

    def take(self, obj: dict[str, Any]) -> bool:
        """Read one event; True when a ``context_recall`` call begins with it (the client
        must not see it, nor what follows, yet)."""

    def hide(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        """The event as a client that never declared the tool may see it: the recall
        calls left out, later indices closed up (``obj`` itself when unchanged; None:
        nothing is left). For a reply relayed although it calls the tool."""

    def turn(self) -> Turn: ...


class Continuity(Protocol):
    """One client stream over several replies: what the client sees of each event."""

    def start(self, follow: bool) -> None:
        """A reply begins (``follow``: a follow-up, after a recall round)."""

    def event(self, obj: dict[str, Any], follow: bool,
              usages: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The event as the client gets it (``obj`` itself: its bytes unchanged; None: left
        out); ``usages``: every reply's usage so far, for the summed usage."""


class Wire(Protocol):
    name: str
    usage_key: str  # where a whole reply body holds its usage object

    def can_offer(self, data: dict[str, Any]) -> bool: ...

    def add_tool(self, raw: bytes) -> bytes: ...

    def turn(self, data: dict[str, Any]) -> Turn:
        """A whole (non-streamed) reply body."""

    def follow_up(self, sent: dict[str, Any], rounds: list[Round], last: bool) -> bytes: ...

    def reader(self) -> Reader: ...

    def continuity(self) -> Continuity: ...

    def shown(self, final: dict[str, Any], sent: bytes) -> dict[str, Any]:
        """Top-level fields of a whole final reply, after recall rounds, that the client
        sees otherwise (the usage aside): what they would be without the rounds
        (``sent``: the first request's body as sent)."""


def sum_counts(last: dict[str, Any], all_usages: list[dict[str, Any]]) -> dict[str, Any]:
    """``last`` (a usage object) with every count summed over ``all_usages``."""
    out: dict[str, Any] = {}
    for key, value in last.items():
        same = [u.get(key) for u in all_usages if isinstance(u, dict)]
        if isinstance(value, bool):
            out[key] = value
        elif isinstance(value, int):
            out[key] = sum(v for v in same if isinstance(v, int) and not isinstance(v, bool))
        elif isinstance(value, dict):
            out[key] = sum_counts(value, [v for v in same if isinstance(v, dict)])
        else:
            out[key] = value
    return out


class SummedUsage:
    """A follow-up's events go out as sent; only the usage object (``key``) of one that
    carries it holds the sum over rounds (Chat Completions' usage chunk, each Gemini
    chunk's ``usageMetadata``)."""

    def __init__(self, key: str = "usage") -> None:
        self.key = key

    def start(self, follow: bool) -> None:
        pass

    def event(self, obj: dict[str, Any], follow: bool,
              usages: list[dict[str, Any]]) -> dict[str, Any] | None:
        if follow and isinstance(obj.get(self.key), dict):
            return {**obj, self.key: sum_counts(obj[self.key], usages)}
        return obj


class WireBase:
    """What every wire does alike: its tool appended to the client's, a fresh reader per
    streamed reply and a fresh continuity per client stream."""

    def __init__(self, name: str, tool: dict[str, Any], reader: Callable[[], Reader],
                 continuity: Callable[[], Continuity]) -> None:
        self.name, self.tool, self.tool_json = name, tool, compact(tool)
        self._reader, self._continuity = reader, continuity
        self.usage_key = "usage"

    def add_tool(self, raw: bytes) -> bytes:
        return add_tool(raw, self.tool_json)

    def reader(self) -> Reader:
        return self._reader()

    def continuity(self) -> Continuity:
        return self._continuity()

    def shown(self, final: dict[str, Any], sent: bytes) -> dict[str, Any]:
        return {}


def tool_name(tool: Any) -> str:
    if not isinstance(tool, dict):
        return ""
    fn = tool.get("function")
    return str(fn.get("name") if isinstance(fn, dict) else tool.get("name") or "")


def has_tools(data: dict[str, Any]) -> bool:
    """The client sent tools and none of them is ``context_recall``."""
    tools = data.get("tools")
    return isinstance(tools, list) and bool(tools) and not any(
        tool_name(t) == TOOL_NAME for t in tools)


def forces(choice: Any) -> bool:
    """A ``tool_choice`` that rules the recall tool out: none, or one named tool, or a
    list of allowed ones (Responses)."""
    if choice == "none":
        return True
    if not isinstance(choice, dict):
        return False
    return choice.get("type") in ("none", "function", "tool", "allowed_tools", "custom") or \
        isinstance(choice.get("function"), dict)


def may_call(data: dict[str, Any]) -> bool:
    """The client sent tools (none named ``context_recall``) and lets the model call ours."""
    return has_tools(data) and not forces(data.get("tool_choice"))


def add_tool(raw: bytes, tool_json: str) -> bytes:
    """The body with ``tool_json`` appended to its ``tools`` array (the rest byte for
    byte); ``raw`` itself when it has no such array."""
    try:
        text = raw.decode("utf-8")
        data, spans = object_spans(text)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return raw
    if not isinstance(data.get("tools"), list) or not data["tools"]:
        return raw
    _, end = spans["tools"]
    close = text.rindex("]", 0, end)
    return (text[:close] + "," + tool_json + text[close:]).encode("utf-8")


def without_tool(tools: Iterable[Any]) -> list[Any]:
    return [t for t in tools if tool_name(t) != TOOL_NAME]


def finish_body(body: dict[str, Any], last: bool) -> bytes:
    """The follow-up's bytes; the last allowed round goes without the tool, so its reply
    cannot call it again."""
    if last:
        body["tools"] = without_tool(body.get("tools") or [])
    return json.dumps(body, ensure_ascii=False).encode("utf-8")


def repeated(reply: Iterable[Any], kinds: tuple[str, ...]) -> list[dict[str, Any]]:
    """The reply's items (or blocks) a follow-up sends back: all but the client's own
    calls (they are asked again), without the keys the reply left null."""
    return [{k: v for k, v in i.items() if v is not None} for i in reply
            if isinstance(i, dict) and not (i.get("type") in kinds and i.get("name") != TOOL_NAME)]


def split_calls(items: Iterable[Any], kinds: tuple[str, ...], args: str,
                id_key: str) -> tuple[list[Call], int]:
    """The recall calls among ``items`` (tool-call items or blocks of the given types),
    and how many other calls there are."""
    ours, others = [], 0
    for item in items:
        if not isinstance(item, dict) or item.get("type") not in kinds:
            continue
        if item.get("name") == TOOL_NAME:
            ours.append(Call(str(item.get(id_key) or ""), item.get(args)))
        else:
            others += 1
    return ours, others
