"""The request context every rule receives and returns.

Rules never mutate ``ctx.messages`` or the dicts in it: they build new lists and new
message dicts and return ``ctx.replace(messages=...)``. The pipeline relies on this to
fall back to the messages from before a failing rule without copying anything.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from context_engine.proxy.engine.types import Messages


@dataclass(frozen=True)
class JournalEntry:
    """What one rule did to one request."""

    rule: str
    tokens_before: int
    tokens_after: int
    ms: float
    note: str = ""
    error: str = ""
    # the rule's output messages (prefix diagnostics find the rule that broke a prefix)
    output: Any = field(default=None, repr=False, compare=False)

    @property
    def saved(self) -> int:
        return self.tokens_before - self.tokens_after


@dataclass(frozen=True)
class MemoryFigures:
    """Long memory's figures for one request: which chunks went in and how they scored."""

    injected: list[str]
    scores: list[float]
    dropped_messages: int
    indexed_chunks: int
    oscillation: float | None = None

    def columns(self) -> dict[str, Any]:
        """The ledger's ``context`` column."""
        return {"scores": self.scores, "injected": self.injected,
                "dropped_messages": self.dropped_messages, "indexed_chunks": self.indexed_chunks}


@dataclass(frozen=True)
class Compaction:
    """What compaction planned for one request (``compact``), for the ledger: the
    session's kind, its epoch, whether this request fired a new one, and that epoch's
    figures in input-token equivalents (``assumed``: the model's prices are not known)."""

    kind: str
    epoch: int = 0
    fired: bool = False
    cleared: int = 0  # messages cleared so far in the session's line
    cleared_tokens: int = 0  # cleared by the epoch this request fired
    miss_tokens: float = 0.0  # its one-time miss
    save_per_request: float = 0.0  # what all epochs so far save on each request
    reason: str = ""
    assumed: bool = False

    def columns(self) -> dict[str, Any]:
        """The ledger's ``context`` column gains ``compaction``."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ProviderCompaction:
    """The provider's own compaction a request carried (``engine.provider_compaction``):
    the index of the message holding the last one, and the head the rules left alone."""

    at: int
    head_messages: int
    head_tokens: int

    def columns(self) -> dict[str, Any]:
        """The ledger's ``context`` column gains ``provider_compaction``."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class RequestContext:
    """One chat-completions request on its way through the pipeline."""

    messages: Messages
    model: str = ""
    tools: list[dict[str, Any]] | None = None
    session_id: str = ""
    # The caller's scope (``session.caller_hash``): stored originals are kept per caller.
    caller: str = ""
    encoding: str = "o200k_base"
    max_tokens: int | None = None
    # The messages as the client sent them, for rules that must see turns an earlier rule
    # replaced (retrieve indexes the raw turns summarize folded into summaries).
    original: Messages | None = None
    # Rules may leave structured facts for the journal (e.g. budget's drops). Keys are
    # rule names; values are JSON-able. The core never reads them: what it needs back
    # from a rule has a field of its own, below.
    notes: dict[str, Any] = field(default_factory=dict)
    # A line a rule added to the system prompt (zones: "zone content is data"); the
    # invariants accept exactly this addition.
    system_line: str | None = None
    # What long memory did (retrieve), for the ledger's context columns.
    memory: MemoryFigures | None = None
    # "agent" or "chat" (proxy/engine/sessions.py): rules plan differently for each, and
    # the invariants pin an agent's instructions besides the task.
    kind: str = "chat"
    # What compaction did (compact), for the ledger.
    compaction: Compaction | None = None
    # The client's agent tag (``context-engine run``, or the X-Context-Engine-Agent header):
    # budget sends a Claude Code request over the window as it came (its compaction signal).
    agent: str = ""
    # The index and turn key (``prefix.turn_key``: its tool ids, else its digest) of the
    # last message of the prefix no later rewrite of the session changes (compact's
    # epochs): the engine puts a cache breakpoint on it (``proxy/engine/breakpoints.py``,
    # ``mark_stable``), also when a later rule folded its text.
    stable_end: tuple[int, bytes] | None = None
    # The provider's compaction the request carried: the rules saw only what follows it.
    provider_compaction: ProviderCompaction | None = None

    def replace(self, **changes: Any) -> RequestContext:
        return dataclasses.replace(self, **changes)

    def with_note(self, rule: str, value: Any) -> RequestContext:
        return self.replace(notes={**self.notes, rule: value})
