from typing import Any

from context_engine.bench.metrics import (
    cache_cost,
    length_bucket,
    median,
    percentile,
    probe_retained,
    stable_prefix_tokens,
    visible_text,
)
from context_engine.proxy.engine.tokens import TokenCounter
from tests.bench.conftest import SYSTEM, agent_messages, tool_call

COUNTER = TokenCounter("o200k_base")


def test_visible_text_covers_contents_text_parts_and_tool_arguments():
    messages: list[Any] = [
        SYSTEM,
        {"role": "user", "content": [{"type": "text", "text": "part one"}]},
        {"role": "assistant", "content": None,
         "tool_calls": [tool_call("c1", args='{"city": "Z\\u00fcrich"}')]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    text = visible_text(messages)
    for evidence in ("part one", "Zürich", '"city"', "sunny", "helpful agent", "lookup"):
        assert probe_retained([evidence], text), evidence
    for structural in ("c1", "function", "tool"):
        assert not probe_retained([structural], text), structural


def test_probe_is_lost_when_one_evidence_substring_is_gone():
    messages = agent_messages()
    text = visible_text(messages)
    assert probe_retained(["ABC123", "B12"], text)
    without_gate = [m for m in messages if m.get("tool_call_id") != "c2"]
    assert not probe_retained(["ABC123", "B12"], visible_text(without_gate))


def test_evidence_does_not_match_across_two_messages():
    messages = [{"role": "user", "content": "gate B"}, {"role": "user", "content": "12"}]
    assert not probe_retained(["B12"], visible_text(messages))
    assert not probe_retained(["B\n12"], visible_text(messages))


def test_percentiles_and_median_on_known_values():
    values = [float(v) for v in range(1, 101)]
    assert median(values) == 50.5
    assert percentile(values, 95) == 95.0
    assert percentile([3.0], 95) == 3.0
    assert percentile(values[:20], 95) == 19.0  # nearest rank: of 20 samples, not the maximum
    assert median([]) is None and percentile([], 50) is None


def test_length_buckets():
    assert [length_bucket(n) for n in (1, 20, 21, 100, 300, 301)] == [
        "1-20", "1-20", "21-100", "21-100", "101-300", ">300"]


def test_a_pure_append_is_fully_stable():
    prev = agent_messages()[:4]
    cur = agent_messages()
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    stable, full = stable_prefix_tokens(COUNTER, prev, cur, tools, tools)
    assert full
    assert stable == COUNTER.tools(tools) + sum(COUNTER.message(m) for m in prev)


def test_a_changed_message_ends_the_stable_prefix():
    prev = agent_messages()
    cur = [dict(m) for m in prev]  # equal copies still count as identical
    cur[3] = {**cur[3], "content": "[masked]"}
    stable, full = stable_prefix_tokens(COUNTER, prev, cur)
    assert not full
    assert stable == sum(COUNTER.message(m) for m in prev[:3])


def test_key_order_counts_as_a_byte_difference():
    prev = [{"role": "user", "content": "hi"}]
    cur = [{"content": "hi", "role": "user"}]
    assert stable_prefix_tokens(COUNTER, prev, cur) == (0, False)


def test_first_request_and_changed_tools_have_nothing_cached():
    cur = agent_messages()
    assert stable_prefix_tokens(COUNTER, None, cur) == (0, False)
    assert stable_prefix_tokens(COUNTER, cur, cur, None, [{"type": "function"}]) == (0, False)


def test_cache_cost():
    assert cache_cost(1000, 1200, 0.1) == 300.0
    assert cache_cost(0, 500, 0.1) == 500.0
