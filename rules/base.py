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
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
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
