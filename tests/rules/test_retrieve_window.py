"""``retrieve``'s window: where the raw tail begins, in one pass over the messages."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from context_engine.proxy.engine.messages import (
    closed_block_count,
    last_user_index,
    system_prefix_len,
    units,
)
from context_engine.proxy.engine.tokens import TokenCounter
from context_engine.rules.retrieve.window import Tail


class CountingCounter(TokenCounter):
    """A real counter that also counts how many messages it was asked to count."""

    def __init__(self) -> None:
        self.calls = 0

    def message(self, m: Any) -> int:
        self.calls += 1
        return super().message(m)


def _reference_cut(tail: Tail, msgs: list[Any], counter: TokenCounter) -> int:
    """The definition, boundary by boundary (quadratic)."""
    head = system_prefix_len(msgs)
    spans = units(msgs, head)
    lu = last_user_index(msgs)
    for k in range(closed_block_count(len(spans), tail.window, tail.block), 0, -1):
        end = spans[k * tail.block - 1][1]
        if 0 <= lu < end:
            end = max([b for b, _ in spans if b <= lu] + [head])
        if end <= head:
            continue
        keep = tail.kept(msgs, head, end)
        leaving = counter.messages([msgs[i] for i in range(head, end) if i not in keep])
        after = units(msgs, end)[: tail.window]
        staying = counter.messages(msgs[:head] + msgs[end:after[-1][1] if after else end])
        if leaving >= max(tail.min_closed_tokens, tail.min_drop_ratio * staying):
            return end
    return head


def _conversation(rng: random.Random, n: int) -> list[Any]:
    msgs: list[Any] = [{"role": "system", "content": "You help."}]
    for i in range(n):
        kind = rng.random()
        if kind < 0.15:
            msgs.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}]})
            msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": "r " * rng.randint(1, 300)})
        elif kind < 0.2:
            msgs.append({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}},
                                                     {"type": "text", "text": "see"}]})
        else:
            role = "user" if len(msgs) % 2 else "assistant"
            msgs.append({"role": role, "content": f"turn {i} " + "w " * rng.randint(0, 200)})
    return msgs


@given(st.integers(0, 10_000), st.integers(0, 60), st.integers(0, 5), st.integers(1, 5),
       st.sampled_from([0, 50, 2000]), st.sampled_from([0.0, 0.5, 2.0]), st.booleans())
def test_cut_is_the_latest_boundary_that_pays_off(seed, n, window, block, min_tokens, ratio, tools):
    msgs = _conversation(random.Random(seed), n)
    tail = Tail(window, block, min_tokens, ratio, tools)
    counter = TokenCounter()
    assert tail.cut(msgs, counter) == _reference_cut(tail, msgs, counter)


def test_cut_counts_each_message_once():
    msgs = _conversation(random.Random(1), 2000)
    counter = CountingCounter()
    Tail(4, 2, 10 ** 9, 10.0, False).cut(msgs, counter)  # no boundary pays off: all are tried
    assert counter.calls <= len(msgs)
