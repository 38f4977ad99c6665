"""Re-reads: what the rewrite costs the agent, read off the traffic the proxy already sees.

The agent's own history always carries every tool result as it first came; what the
proxy sent for this request is the rewrite. So one request tells, with no state kept
between requests:

- the *newest* tool results (those after the last assistant turn) are what the agent
  just ran;
- a newest result that repeats an *older* result of the same history (the same text, or
  the same call: the tool's name and canonical arguments; for a shell tool the same
  command string) is a repeat read;
- it is a **re-read** when that older result went out cleared or shortened in this
  request (its ``tool_call_id`` missing from what was sent, or its text changed), and is
  attributed to the rule whose output first changed it (the pipeline's journal keeps
  each rule's output); otherwise it is a repeat read of content the agent still had:
  the agent's base rate, reported beside the re-reads.

Compaction epochs are sticky (``rules/compact/epochs.py``), so what is cleared now was
cleared when the agent chose to run the call again (except for an epoch this very
request fired: counted all the same, a slight over-count on the rule's side).

A newest result that reads like a tool-call format error (invalid arguments, an unknown
tool, malformed JSON) is counted too: the report relates it to the request before.

Linear in the request: each tool result's text is hashed once, and a dict maps each
text and each call signature to the newest older result holding it. Rule attribution
looks at the journal only for the (rare) re-reads found.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from context_engine.proxy.engine.messages import call_index, text_of

MIN_TEXT = 64  # shorter results ("ok", "") repeat by chance: matched by their call only
SHELL_KEYS = ("command", "cmd")  # a shell tool's argument holding the command
RECALL_TOOL = "context_recall"
FORMAT_HEAD = 400  # characters of a result read for a format error
FORMAT_ERRORS = (
    "invalid arguments", "invalid_arguments", "invalid tool", "unknown tool", "no such tool",
    "tool not found", "malformed json", "invalid json", "failed to parse", "jsondecodeerror",
    "inputvalidationerror", "missing required parameter", "missing required argument",
    "unexpected keyword argument", "could not parse tool", "invalid parameters",
)
OTHER = "(other)"  # the change came after the rules (recall markers, breakpoints)


@dataclass(frozen=True)
class Read:
    """One repeat read: the rule that changed the older result ("" when none did), the
    newest result's tokens, and the assistant turns between the two reads."""

    rule: str
    tokens: int
    turns: int
    tool: str


@dataclass(frozen=True)
class Signals:
    """The behaviour signals of one request."""

    rereads: tuple[Read, ...] = ()
    repeats: tuple[Read, ...] = ()  # repeat reads of results sent whole (base rate)
    format_errors: int = 0
    user_turn: bool = False  # the request opens a task (its newest message is the user's)

    def columns(self) -> dict[str, Any]:
        """The ledger's columns."""
        by_rule: dict[str, list[int]] = {}
        for r in self.rereads:
            n, tokens = by_rule.get(r.rule, [0, 0])
            by_rule[r.rule] = [n + 1, tokens + r.tokens]
        return {"rereads": len(self.rereads), "reread_tokens": sum(r.tokens for r in self.rereads),
                "reread_turns": sum(r.turns for r in self.rereads), "reread_rules": by_rule,
                "repeat_reads": len(self.repeats),
                "repeat_read_tokens": sum(r.tokens for r in self.repeats),
                "format_errors": self.format_errors, "user_turn": self.user_turn}


def signature(name: str, arguments: Any) -> tuple[str, str]:
    """A call's identity: its tool and canonical arguments; a shell call's command string."""
    args = arguments
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return name, args.strip()
    if isinstance(args, dict):
        for key in SHELL_KEYS:
            command = args.get(key)
            if isinstance(command, list):
                command = " ".join(map(str, command))
            if isinstance(command, str):
                return name, command.strip()
    return name, json.dumps(args, sort_keys=True, ensure_ascii=False, default=str)


def _texts_by_id(messages: Sequence[Any]) -> dict[str, str]:
    return {str(m.get("tool_call_id")): text_of(m) for m in messages
            if isinstance(m, dict) and m.get("role") == "tool"}


@dataclass
class _Sent:
    """What was sent, read lazily: tool result text by call id."""

    messages: Sequence[Any] | None
    texts: dict[str, str] | None = field(default=None)

    def changed(self, call_id: str, original: str) -> bool:
        if self.messages is None:
            return False
        if self.texts is None:
            self.texts = _texts_by_id(self.messages)
        return self.texts.get(call_id) != original


def _rule_of(call_id: str, original: str, original_messages: Any,
             journal: Sequence[Any]) -> str:
    """The first rule whose output changed the result of ``call_id``."""
    before = original_messages
    for entry in journal:
        out = getattr(entry, "output", None)
        if out is None or out is before:
            continue
        before = out
        if _texts_by_id(out).get(call_id) != original:
            return str(entry.rule)
    return OTHER


def _format_error(text: str) -> bool:
    head = text[:FORMAT_HEAD].lower()
    return any(p in head for p in FORMAT_ERRORS)


def detect(original: Sequence[Any], sent: Sequence[Any] | None, journal: Sequence[Any],
           count: Callable[[str], int]) -> Signals:
    """The signals of one request: ``original`` is the history as the client sent it (the
    pipeline's input), ``sent`` what went out (None: the original), ``journal`` the
    pipeline's entries (each rule's ``output``), ``count`` a text's tokens."""
    last = next((i for i in range(len(original) - 1, -1, -1)
                 if isinstance(original[i], dict) and original[i].get("role") == "assistant"), -1)
    tail = original[-1] if original else None
    user_turn = isinstance(tail, dict) and tail.get("role") == "user"
    if last < 0:
        return Signals(user_turn=user_turn)
    calls = call_index(original)
    by_text: dict[int, int] = {}
    by_call: dict[tuple[str, str], int] = {}
    turns_before = [0] * (len(original) + 1)  # assistant turns before each index
    seen = _Sent(sent)
    rereads: list[Read] = []
    repeats: list[Read] = []
    errors = 0
    for i, m in enumerate(original):
        turns_before[i + 1] = turns_before[i] + (isinstance(m, dict) and m.get("role") == "assistant")
        if not isinstance(m, dict) or m.get("role") != "tool":
            continue
        call_id = str(m.get("tool_call_id"))
        name, arguments = calls.get(call_id, ("", None))
        text = text_of(m)
        key = hash(text) if len(text) >= MIN_TEXT else None
        sig = signature(name, arguments) if name and name != RECALL_TOOL else None
        if i > last:
            errors += _format_error(text)
            j = max(by_text.get(key, -1) if key is not None else -1,
                    by_call.get(sig, -1) if sig is not None else -1)
            if j >= 0:
                older = original[j]
                older_id, older_text = str(older.get("tool_call_id")), text_of(older)
                read = Read("", count(text), turns_before[i] - turns_before[j], name)
                if seen.changed(older_id, older_text):
                    rereads.append(Read(_rule_of(older_id, older_text, original, journal),
                                        read.tokens, read.turns, name))
                else:
                    repeats.append(read)
            continue
        if key is not None:
            by_text[key] = i
        if sig is not None:
            by_call[sig] = i
    return Signals(tuple(rereads), tuple(repeats), errors, user_turn)
