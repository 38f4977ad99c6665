"""Context metrics on hand-built cases with known answers."""

from __future__ import annotations

import pytest

from context_engine.proxy.engine.messages import MEMORY_HEADER, SUMMARY_HEADER
from context_engine.proxy.recording.context_metrics import (
    Oscillation,
    data_segments,
    tool_retries,
    utilization,
)


def test_data_segments_are_tool_results_summaries_and_memory():
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "q"},
            {"role": "tool", "tool_call_id": "1", "content": "result"},
            {"role": "user", "content": SUMMARY_HEADER + "\nfacts"},
            {"role": "user", "content": MEMORY_HEADER + "\nsnippet"}]
    assert data_segments(msgs) == ["result", SUMMARY_HEADER + "\nfacts", MEMORY_HEADER + "\nsnippet"]


def test_utilization_counts_lines_the_response_drew_on():
    seg = "flight HAT001 departs JFK at noon\nthe weather is mild today\nbags allowed two"
    # line 1 shares the id HAT001, line 3 shares the 3-gram "bags allowed two"; line 2 is unused
    u = utilization([seg], "Your flight HAT001 is on time and bags allowed two per person.")
    assert u == pytest.approx((6 + 3) / (6 + 5 + 3))
    assert utilization([seg], "Nothing related here.") == 0.0
    assert utilization([], "x") is None and utilization([seg], "") is None


def test_tool_retries_count_identical_consecutive_calls():
    def call(args):
        return {"role": "assistant", "content": None,
                "tool_calls": [{"id": "x", "type": "function", "function": {"name": "f", "arguments": args}}]}
    msgs = [call("{}"), {"role": "tool", "tool_call_id": "x", "content": "err"}, call("{}"),
            {"role": "tool", "tool_call_id": "x", "content": "err"}, call('{"a":1}')]
    assert tool_retries(msgs) == 1


def test_oscillation_is_the_share_of_new_snippets():
    o = Oscillation(max_sessions=2)
    assert o.observe("s", ["a", "b"]) == 1.0
    assert o.observe("s", ["a", "b"]) == 0.0
    assert o.observe("s", ["a", "c", "d", "e"]) == 0.75
    assert o.observe("t", []) is None
    o.observe("u", ["z"])  # evicts "s" (least recent)
    assert o.observe("s", ["a"]) == 1.0
