"""The rule contract and helpers shared by rules.

A rule is a class with a ``name``, a frozen dataclass ``Config`` whose fields carry
``metadata={"help": ...}``, a constructor ``(config, deps)`` and an async
``apply(ctx) -> ctx``. Rules are pure over the context: effects (the store, a
summarizer, a retriever) come in through ``RuleDeps``. A rule never mutates the
messages it is given; it returns new lists and new dicts.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from proxy.context import RequestContext
from proxy.store import MemoryStore, Store
from proxy.tokens import TokenCounter
from proxy.types import Message


@dataclass(frozen=True)
class RuleDeps:
    """Effects a rule may use. Tests pass in-memory fakes."""

    store: Store = field(default_factory=MemoryStore)
    counter: TokenCounter = field(default_factory=TokenCounter)
    extra: dict[str, Any] = field(default_factory=dict)


class Rule(Protocol):
    name: ClassVar[str]
    Config: ClassVar[type[Any]]

    async def apply(self, ctx: RequestContext) -> RequestContext: ...


def option(default: Any, help: str) -> Any:
    """A typed rule option with a help line (shown by ``context-engine rules``)."""
    if isinstance(default, (list, dict, set)):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


def config_help(config_cls: type[Any]) -> list[tuple[str, str, Any, str]]:
    """(name, type, default, help) for each option of a rule's config dataclass."""
    rows = []
    for f in dataclasses.fields(config_cls):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        rows.append((f.name, str(f.type), default, f.metadata.get("help", "")))
    return rows


# --- message helpers -------------------------------------------------------------


def text_of(m: Message | dict[str, Any]) -> str:
    """The visible text of a message: string content or the text parts of a list."""
    content = m.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] if isinstance(p.get("text"), str) else ""
                         for p in content if isinstance(p, dict))
    return ""


def last_user_index(messages: list[Any]) -> int:
    """Index of the last ``user`` message, or -1."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return i
    return -1


def system_prefix_len(messages: list[Any]) -> int:
    """How many leading messages are system/developer prompts."""
    n = 0
    while n < len(messages) and messages[n].get("role") in ("system", "developer"):
        n += 1
    return n


def tool_call_ids(m: Message | dict[str, Any]) -> list[str]:
    return [c.get("id", "") for c in m.get("tool_calls") or ()]


def fingerprint(*parts: Any) -> str:
    """A short stable hash of JSON-able parts."""
    blob = json.dumps(parts, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def made_of(text: str, phrases: frozenset[str], longest: int) -> bool:
    """True when ``text`` is one or more of ``phrases`` in a row, whitespace allowed after
    each ("ok thanks", "嗯嗯好的"). A word-break walk over positions: linear in the text
    times ``longest`` (the longest phrase), where a regex ``(?:a|aa)+`` backtracks
    exponentially."""
    n = len(text)
    if not n or text[0].isspace():
        return False
    reach = bytearray(n + 1)
    reach[0] = 1
    for i in range(n):
        if not reach[i]:
            continue
        for size in range(1, min(longest, n - i) + 1):
            if text[i:i + size] in phrases:
                j = i + size
                reach[j] = 1
                while j < n and text[j].isspace():
                    j += 1
                    reach[j] = 1
    return bool(reach[n])


# --- turns and blocks --------------------------------------------------------------
#
# A *unit* is the smallest piece of history a rule may drop, fold or summarize without
# breaking the request: a user message; an assistant message together with the tool
# results that answer its tool calls; any other single message. Units never split a
# tool-call/tool-result pair.
#
# Block alignment (shared by every rule whose decision depends on later turns): after
# the leading system prompts, units are grouped into blocks of ``block`` units counted
# from the start. A block is *closed* once all of its units are older than the recent
# window of ``window`` units, so the raw tail holds between ``window`` and
# ``window + block - 1`` units. Between two block boundaries a new request only appends
# to the raw tail; everything before it is byte-identical to the previous request's, and
# the provider's prompt cache keeps hitting.


def units(messages: list[Any], start: int = 0) -> list[tuple[int, int]]:
    """Half-open ``(begin, end)`` index spans of the units of ``messages[start:]``."""
    spans: list[tuple[int, int]] = []
    i, n = start, len(messages)
    while i < n:
        j = i + 1
        if messages[i].get("role") == "assistant" and messages[i].get("tool_calls"):
            while j < n and messages[j].get("role") == "tool":
                j += 1
        spans.append((i, j))
        i = j
    return spans


def closed_block_count(n_units: int, window: int, block: int) -> int:
    """How many whole blocks of ``block`` units lie before the recent ``window``."""
    if block <= 0:
        return 0
    return max(0, (n_units - window) // block)


def closed_prefix_end(messages: list[Any], window: int, block: int) -> int:
    """Message index where the closed blocks end and the raw tail begins."""
    head = system_prefix_len(messages)
    spans = units(messages, head)
    closed = closed_block_count(len(spans), window, block) * block
    return spans[closed - 1][1] if closed else head


# Messages that rules inject (summaries, retrieved memory) start with one of these header
# lines, so later rules (zones, budget) can recognise them without adding unknown keys
# to the message dicts, which strict providers would reject.
SUMMARY_HEADER = "[context-engine:summary]"
MEMORY_HEADER = "[context-engine:memory]"
