"""Anthropic's turn rules on a rewrite: neighbours merged once, tool results first."""

from __future__ import annotations

import json

from context_engine.proxy.dialects.anthropic.turns import Out, merge


def _kind(text: str) -> tuple[str, str]:
    block = json.loads(text)
    return block["type"], block.get("tool_use_id", "")


def _result(i: int) -> str:
    return json.dumps({"type": "tool_result", "tool_use_id": f"t{i}", "content": "ok"})


def _text(i: int) -> str:
    return json.dumps({"type": "text", "text": f"note {i}"})


def test_neighbours_the_rewrite_made_become_one_message_tool_results_first():
    outs = [Out("user", [_text(0)], orig=0), Out("user", [_result(1), _text(1)], orig=2),
            Out("user", [_result(2)], orig=4), Out("assistant", [_text(3)], orig=5)]
    got = merge(outs, _kind)
    assert [o.role for o in got] == ["user", "assistant"]
    assert got[0].blocks == [_result(1), _result(2), _text(0), _text(1)]


def test_neighbours_the_client_sent_stay_apart():
    outs = [Out("user", [_text(0)], orig=0), Out("user", [_text(1)], orig=1)]
    assert merge(outs, _kind) == outs


def test_a_long_run_reads_each_block_once():
    calls = []

    def kind(text: str) -> tuple[str, str]:
        calls.append(text)
        return _kind(text)

    outs = [Out("user", [_result(i) if i % 2 else _text(i)], orig=2 * i) for i in range(2000)]
    got = merge(outs, kind)
    assert len(got) == 1 and len(got[0].blocks) == 2000
    assert got[0].blocks[:1000] == [_result(i) for i in range(1, 2000, 2)]
    assert len(calls) <= 2000
