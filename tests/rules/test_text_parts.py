"""A content of one text part reads as its string in the rules that rewrite strings
(``rules/text_parts.py``): the same conversation is rewritten the same whether the client
sent strings or parts, and each message goes back in the client's form."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from context_engine.proxy.engine.prefix import turn_key
from context_engine.rules.compact import Compact
from context_engine.rules.text_parts import TAG, PlainView, on_plain, one_text_part
from context_engine.rules.tool_json.rule import ToolJson
from tests.harness import make_ctx, make_deps, run_rule

ROWS = [{"flight_number": f"HAT{n:03d}", "origin": "JFK", "destination": "SEA", "price": 100 + n,
         "status": "available", "notes": "", "gate": None} for n in range(12)]
RESULT = json.dumps({"flights": ROWS, "count": len(ROWS), "next": None})


def _agent(wrap: Any, steps: int = 8) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are an airline agent."},
                                  {"role": "user", "content": "Find me a flight to Seattle."}]
    for i in range(steps):
        msgs += [{"role": "assistant", "content": None, "tool_calls": [{
                     "id": f"call_{i}", "type": "function",
                     "function": {"name": "search", "arguments": json.dumps({"day": i})}}]},
                 {"role": "tool", "tool_call_id": f"call_{i}", "content": wrap(RESULT.replace("HAT", f"D{i}H"))}]
    return msgs + [{"role": "user", "content": "Book the cheapest."}]


def _part(kind: str) -> Any:
    return lambda text: [{"type": kind, "text": text}]


def test_one_text_part_is_recognised_and_nothing_else_is() -> None:
    assert one_text_part([{"type": "input_text", "text": "a"}]) == "a"
    assert one_text_part([{"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}}]) is None
    assert one_text_part([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]) is None
    assert one_text_part([{"type": "image_url", "image_url": {"url": "x"}}]) is None
    assert one_text_part("a") is None and one_text_part([]) is None


def test_the_view_gives_back_the_clients_objects_and_forms() -> None:
    untouched, changed = {"role": "user", "content": [{"type": "text", "text": "hi"}]}, \
        {"role": "tool", "tool_call_id": "c", "content": [{"type": "output_text", "text": "long"}]}
    view = PlainView()
    seen = view.of([untouched, changed, untouched])
    assert seen[0] is seen[2] and seen[0]["content"] == "hi"  # one copy per client message
    back = view.back([seen[0], {**seen[1], "content": "short"}, {"role": "user", "content": "new"}])
    assert back[0] is untouched
    assert back[1] == {"role": "tool", "tool_call_id": "c", "content": [{"type": "output_text", "text": "short"}]}
    assert back[2] == {"role": "user", "content": "new"} and TAG not in json.dumps(back)


def test_tool_json_compacts_a_one_part_result_as_its_string() -> None:
    plain = run_rule(ToolJson, _agent(lambda t: t)).messages
    for kind in ("text", "input_text"):
        msgs = _agent(_part(kind))
        out = run_rule(ToolJson, msgs).messages
        assert len(out) == len(plain)
        for got, want, sent in zip(out, plain, msgs):
            if want["role"] == "tool":
                assert want["content"] != one_text_part(sent["content"])  # compacted
                assert got["content"] == [{"type": kind, "text": want["content"]}]
            else:
                assert got is sent


def test_a_marked_or_split_result_stays_a_list() -> None:
    marked = _agent(lambda t: [{"type": "text", "text": t, "cache_control": {"type": "ephemeral"}}])
    split = _agent(lambda t: [{"type": "text", "text": t[:40]}, {"type": "text", "text": t[40:]}])
    for msgs in (marked, split):
        assert run_rule(ToolJson, msgs).messages == msgs


COMPACT: dict[str, Any] = {"trigger_tokens": 300, "clear_at_least": 50, "keep_recent": 2, "min_item_tokens": 10,
           "min_horizon": 100, "way_back": False}


def test_compact_clears_one_part_results_as_it_clears_strings() -> None:
    plain = run_rule(Compact, _agent(lambda t: t), **COMPACT)
    msgs = _agent(_part("text"))
    ctx = make_ctx(msgs, original=msgs)
    out = asyncio.run(Compact(Compact.Config(**COMPACT), make_deps()).apply(ctx))
    assert out.original is msgs  # the next rule reads the client's own list
    cleared = [i for i, m in enumerate(plain.messages) if "[context-engine:cleared]" in json.dumps(m)]
    assert len(cleared) >= 3
    for i, (got, want) in enumerate(zip(out.messages, plain.messages)):
        if want["role"] == "tool":
            assert got["content"] == [{"type": "text", "text": want["content"]}]
            assert (i in cleared) == (want["content"] != one_text_part(msgs[i]["content"]))
        else:
            assert got is msgs[i]


def test_a_stable_end_names_the_turn_as_it_goes_out() -> None:
    msgs = [{"role": "user", "content": [{"type": "text", "text": "task"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "done"}]}]

    async def mark(ctx: Any) -> Any:
        return ctx.replace(messages=[ctx.messages[0], {**ctx.messages[1], "content": "ok"}],
                           stable_end=(0, turn_key(ctx.messages[0])))

    out = asyncio.run(on_plain(make_ctx(msgs), mark))
    assert out.messages[0] is msgs[0]
    assert out.messages[1]["content"] == [{"type": "text", "text": "ok"}]
    assert out.stable_end == (0, turn_key(msgs[0]))


def test_a_pass_that_changes_nothing_hands_back_the_clients_list() -> None:
    """Compact below its trigger only records its figures: the request is unchanged
    (``PipelineResult.changed`` compares the list itself), so it goes out as sent."""
    msgs = _agent(_part("text"), steps=2)
    out = asyncio.run(Compact(Compact.Config(), make_deps()).apply(make_ctx(msgs, original=msgs)))
    assert out.compaction is not None and out.messages is msgs and out.original is msgs
