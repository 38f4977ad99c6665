"""Which turns leave the request for ``retrieve``'s memory, and from which messages.

Turns leave in closed blocks (as ``summarize`` aligns them): the raw tail begins at the
latest block boundary whose drop pays off under prompt caching, never past the last
user turn. Summaries and (optionally) tool-call units stay in the request. When an
earlier rule already replaced the closed prefix by summaries, memory indexes the
client's own turns before the same raw tail.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from context_engine.proxy.engine.context import RequestContext
from context_engine.proxy.engine.messages import (
    closed_block_count,
    is_injected_ack,
    is_instruction,
    is_summary,
    last_user_index,
    media_refs,
    system_prefix_len,
    units,
)
from context_engine.proxy.engine.sessions import first_user_index
from context_engine.proxy.engine.tokens import REPLY_PRIMING, TokenCounter


@dataclass(frozen=True)
class Tail:
    window: int  # units always kept raw at the end
    block: int  # units per closed block
    min_closed_tokens: int
    min_drop_ratio: float
    keep_tool_units: bool

    def epoch_cut(self, msgs: list[Any], counter: TokenCounter) -> int:
        """Where the raw tail begins. When an earlier rule (summarize) already replaced the
        closed prefix by summaries, the tail begins after the last of them: nothing more
        is dropped, memory only brings back the replaced turns' words."""
        head = system_prefix_len(msgs)
        lu = last_user_index(msgs)
        summaries = [i for i in range(head, max(lu, head)) if is_summary(msgs[i])]
        if summaries:
            return summaries[-1] + 1
        return self.cut(msgs, counter)

    def cut(self, msgs: list[Any], counter: TokenCounter) -> int:
        """Where the raw tail begins: the latest block boundary whose drop pays off.

        Never past the last user turn. A boundary is taken when the turns that leave hold
        ``min_closed_tokens`` and ``min_drop_ratio`` times what stays uncached (system +
        the next ``window`` units); if the newest fails, the one before is tried, so a
        prefix that was dropped once stays dropped (no flip-flop of the cached prefix).

        Linear: each message is counted once and every boundary reads running sums (the
        messages kept for the largest cut are those kept for any smaller one, below it:
        every boundary is a unit boundary).
        """
        head = system_prefix_len(msgs)
        spans = units(msgs, head)
        lu = last_user_index(msgs)
        closed = closed_block_count(len(spans), self.window, self.block)
        if not closed:
            return head
        lu_start = max([b for b, _ in spans if b <= lu] + [head])
        ends = [lu_start if 0 <= lu < spans[k * self.block - 1][1] else spans[k * self.block - 1][1]
                for k in range(closed, 0, -1)]
        keep = self.kept(msgs, head, max(ends))
        total, leave = [0], [0]  # running token sums: all messages, and those that may leave
        for i, m in enumerate(msgs):
            n = counter.message(m)
            total.append(total[-1] + n)
            leave.append(leave[-1] + (n if i >= head and i not in keep else 0))
        starts = {b: k for k, (b, _) in enumerate(spans)}
        for end in ends:
            if end <= head:
                continue
            leaving = leave[end] - leave[head] + REPLY_PRIMING
            k = starts.get(end)
            after = spans[min(len(spans), k + self.window) - 1][1] if k is not None and self.window > 0 \
                else end
            staying = total[head] + total[after] - total[end] + REPLY_PRIMING
            if leaving >= max(self.min_closed_tokens, self.min_drop_ratio * staying):
                return end
        return head

    def kept(self, msgs: list[Any], head: int, cut: int) -> frozenset[int]:
        """Messages of ``head:cut`` that stay: the task (the first user message, pinned),
        summaries (with the line after them), system and developer messages, units holding
        images, audio or files (with the reply to a user message, so two user messages
        never meet), and tool-call units if configured."""
        task = first_user_index(msgs)
        keep = {i for i in range(head, cut) if is_summary(msgs[i]) or i == task
                or is_instruction(msgs[i])}
        keep |= {i + 1 for i in keep if i + 1 < cut and is_injected_ack(msgs, i + 1)}
        spans = units(msgs[:cut], head)
        for k, (b, e) in enumerate(spans):
            if any(media_refs(msgs[i]) for i in range(b, e)):
                reply = spans[k + 1] if msgs[b].get("role") == "user" and k + 1 < len(spans) \
                    and msgs[spans[k + 1][0]].get("role") == "assistant" else (e, e)
                keep |= set(range(b, reply[1]))
            elif self.keep_tool_units and msgs[b].get("tool_calls"):
                keep |= set(range(b, e))
        return frozenset(keep)


def source(ctx: RequestContext, msgs: list[Any], head: int, cut: int,
           keep: frozenset[int]) -> tuple[list[Any], int, int, frozenset[int]]:
    """What to index: the closed prefix as this rule sees it, or, when an earlier rule
    (summarize) replaced raw turns there by summaries, the client's own turns before the
    same raw tail, so that memory still holds their words."""
    original = ctx.original
    if original is None or original is msgs or not any(
            is_summary(msgs[i]) for i in range(head, cut)):
        return msgs, head, cut, keep
    head_o = system_prefix_len(original)
    cut_o = max(head_o, min(len(original), len(original) - (len(msgs) - cut)))
    return original, head_o, cut_o, frozenset()
