"""A provider's own compaction: where the session starts again, for the rules.

OpenAI's Responses API hands back an encrypted ``compaction`` item (from
``/responses/compact``, or ``context_management`` on a create); Anthropic's server
compaction (the ``compact-*`` betas, Claude Code's ``context-management-*``) a
``compaction`` content block, and drops everything before it on the next request. The
adapters read either as an opaque item (``engine.opaque``) of the message that holds it.

What precedes the last one is the provider's business: nothing in it may be cleared,
moved or sent again by a rule. So the engine splits the neutral messages (``split``):
the rules get the leading system messages and what follows the message holding the last
compaction (the *live* part); the untouched *head* (that message and everything before
it) goes back in front of their result (``Boundary.rejoin``), the token counts and the
journal's outputs counting it as sent unchanged. The request's context records it
(``ProviderCompaction``, the ledger's ``context.provider_compaction``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from context_engine.proxy.engine.context import JournalEntry, ProviderCompaction
from context_engine.proxy.engine.messages import is_instruction, system_prefix_len
from context_engine.proxy.engine.opaque import OPAQUE

KINDS = frozenset({"compaction"})  # the type of OpenAI's item and of Anthropic's block


def holds_compaction(m: Any) -> bool:
    return isinstance(m, dict) and any(
        isinstance(o, dict) and o.get("type") in KINDS for o in m.get(OPAQUE) or ())


def last_compaction(messages: list[Any]) -> int:
    """The index of the message holding the last provider compaction (-1: none)."""
    return next((i for i in range(len(messages) - 1, -1, -1) if holds_compaction(messages[i])), -1)


@dataclass(frozen=True)
class Boundary:
    """Where a request's live part starts: after ``lead`` instructions, the head runs to
    ``end`` (the message past the last compaction's)."""

    messages: list[Any]  # the request's neutral messages, whole
    lead: int
    end: int

    @property
    def head(self) -> list[Any]:
        return self.messages[self.lead:self.end]

    def live(self) -> list[Any]:
        return self.messages[:self.lead] + self.messages[self.end:]

    def whole(self, live: list[Any]) -> list[Any]:
        """``live`` (a rule's output) with the head back after its instructions."""
        if len(live) < self.lead or not all(is_instruction(m) for m in live[:self.lead]):
            raise ValueError("the instructions before the provider's compaction were changed")
        return live[:self.lead] + self.head + live[self.lead:]

    def rejoin(self, result: Any, counter: Any) -> Any:
        """The pipeline's result over the live part as one over the whole request (in
        place): the head back in its messages and its journal's outputs, its tokens in
        every count; unchanged, the client's messages themselves."""
        frozen = sum(counter.message(m) for m in self.head)
        try:
            messages = self.whole(result.ctx.messages) if result.changed else self.messages
        except ValueError:  # the rules moved the instructions: the original goes out
            messages, result.failed_open = self.messages, True
            result.tokens_after = result.tokens_before
            result.problems = [*result.problems, "instructions moved across a provider compaction"]
        result.ctx = result.ctx.replace(messages=messages, provider_compaction=ProviderCompaction(
            self.end - 1, len(self.head), frozen))
        result.original_messages = self.messages
        result.tokens_before += frozen
        result.tokens_after += frozen
        result.journal = [self._entry(e, frozen) for e in result.journal]
        return result

    def _entry(self, e: JournalEntry, frozen: int) -> JournalEntry:
        output = e.output
        if isinstance(output, list):
            try:
                output = self.whole(output)
            except ValueError:
                output = None
        return dataclasses.replace(e, tokens_before=e.tokens_before + frozen,
                                   tokens_after=e.tokens_after + frozen, output=output)


def split(body: dict[str, Any]) -> tuple[dict[str, Any], Boundary | None]:
    """The body the rules get (its messages after the last provider compaction, the
    leading instructions kept) and the boundary; ``body`` itself and None without one."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return body, None
    at = last_compaction(messages)
    if at < 0:
        return body, None
    lead = min(system_prefix_len(messages), at)
    boundary = Boundary(messages, lead, at + 1)
    return {**body, "messages": boundary.live()}, boundary
