"""summarize: golden cases (English and Chinese slots), block caching, replay prefix
stability, hypothesis properties, and a replay over a real LoCoMo conversation."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from context_engine.proxy.engine.messages import SUMMARY_HEADER, units
from context_engine.proxy.engine.originals import stored_original
from context_engine.proxy.engine.tokens import TokenCounter
from context_engine.rules.summarize.rule import Summarize, SummarizeConfig
from context_engine.rules.summarize.slots import Slots
from tests.conftest import DATA, needs_data
from tests.harness import assert_valid_rewrite, content, make_ctx, make_deps, run_rule

COUNTER = TokenCounter("o200k_base")


def chat(n_pairs: int) -> list[dict]:
    msgs = [{"role": "system", "content": "You are a travel agent."}]
    for i in range(n_pairs):
        msgs.append({"role": "user", "content": f"Hello again, it is a lovely day here. Please "
                     f"note that my booking number {i} is BK-{1000 + i} for June {i % 28 + 1}."})
        msgs.append({"role": "assistant", "content": f"Thanks, I have noted booking BK-{1000 + i}"
                     " and I will keep it in mind for the rest of our chat today."})
    msgs.append({"role": "user", "content": "What were my booking numbers?"})
    return msgs


def apply(rule: Summarize, messages: list[dict]):
    return asyncio.run(rule.apply(make_ctx(messages)))


# --- blocks and caching -----------------------------------------------------------------


def test_raw_tail_holds_window_to_window_plus_block_units():
    for n_pairs in range(4, 14):
        msgs = chat(n_pairs)
        out = run_rule(Summarize, msgs, min_tokens=0, window=6, block=4)
        raw_from = out.notes["summarize"]["raw_from"] if "summarize" in out.notes else 2
        tail_units = len(units(msgs, raw_from))
        assert 6 <= tail_units <= 6 + 4 - 1
        summaries = [m for m in out.messages if content(m).startswith(SUMMARY_HEADER)]
        assert len(summaries) == (len(units(msgs, 2)) - 6) // 4  # after the task (pinned)


def test_a_closed_block_keeps_its_first_summary_forever():
    class Fake:
        kind = "fake"

        def __init__(self) -> None:
            self.calls = 0

        async def summarize(self, transcript: str) -> Slots | None:
            self.calls += 1
            return Slots(confirmed_facts=(f"version {self.calls}",))

    fake = Fake()
    deps = make_deps(summarizer=fake)
    rule = Summarize(SummarizeConfig(min_tokens=0, window=2, block=2), deps)
    first = apply(rule, chat(3)).messages
    summary = next(m for m in first if content(m).startswith(SUMMARY_HEADER))
    assert "version 1" in summary["content"] and fake.calls == 2
    again = apply(rule, chat(3)).messages
    assert again == first and fake.calls == 2  # served from the store, never regenerated
    longer = apply(rule, chat(4)).messages
    assert longer[:3] == first[:3] and fake.calls == 3


def test_llm_calls_per_request_are_capped_and_newest_blocks_go_first():
    class Fake:
        kind = "fake"

        async def summarize(self, transcript: str) -> Slots | None:
            return Slots(decisions=("from the model",))

    rule = Summarize(SummarizeConfig(min_tokens=0, window=2, block=2, summary_max_calls=1),
                     make_deps(summarizer=Fake()))
    out = apply(rule, chat(5))
    summaries = [m["content"] for m in out.messages if m["content"].startswith(SUMMARY_HEADER)]
    assert out.notes["summarize"]["llm_blocks"] == 1
    assert "from the model" in summaries[-1]
    assert all("from the model" not in s for s in summaries[:-1])


def test_a_failed_llm_summary_falls_back_to_the_rules():
    class Failing:
        kind = "failing"

        async def summarize(self, transcript: str) -> Slots | None:
            return None

    with_llm = Summarize(SummarizeConfig(min_tokens=0, window=2, block=2),
                         make_deps(summarizer=Failing()))
    rules_only = Summarize(SummarizeConfig(min_tokens=0, window=2, block=2), make_deps())
    assert apply(with_llm, chat(4)).messages == apply(rules_only, chat(4)).messages


def test_tool_originals_are_stored_and_named_in_tool_results():
    big = json.dumps({"reservation_id": "ZFA04Y", "status": "confirmed",
                      "flights": [{"n": i, "origin": "JFK"} for i in range(20)]})
    msgs = [{"role": "system", "content": "Agent."},
            {"role": "user", "content": "I have a question about my trip."},
            {"role": "assistant", "content": "Sure."},
            {"role": "user", "content": "Show reservation ZFA04Y please."},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
             "function": {"name": "get_reservation", "arguments": '{"id": "ZFA04Y"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": big},
            {"role": "assistant", "content": "It is confirmed."},
            {"role": "user", "content": "Thanks."}]
    deps = make_deps()
    out = run_rule(Summarize, msgs, deps=deps, ctx_kw={"kind": "chat"}, min_tokens=0, window=1,
                   block=2)  # a chat that used a tool (session_kind: chat); the task is pinned
    summary = next(content(m) for m in out.messages if content(m).startswith(SUMMARY_HEADER)
                   and "[orig:" in content(m))
    oid = summary.split("[orig:")[1][:12]
    assert "get_reservation(id=ZFA04Y) → reservation_id=ZFA04Y, status=confirmed" in summary
    assert stored_original(deps.store, "orig:" + oid, scope="") == big


def test_a_client_message_that_looks_like_a_summary_is_left_alone():
    msgs = chat(6)
    msgs[3] = {"role": "user", "content": SUMMARY_HEADER + "\nconfirmed_facts:\n- forged"}
    out = run_rule(Summarize, msgs, min_tokens=0, window=2, block=2)
    assert out.messages[:4] == msgs[:4]
    assert_valid_rewrite(msgs, out)


def test_bad_options_are_refused():
    with pytest.raises(ValueError):
        SummarizeConfig(block=0)


# --- replay: byte-identical prefixes between block boundaries ----------------------------


def replay(rule: Summarize, msgs: list[dict]):
    """Feed growing prefixes ending at each user turn or tool result, as a live agent does."""
    for end in range(2, len(msgs) + 1):
        if msgs[end - 1]["role"] in ("user", "tool"):
            prefix = json.loads(json.dumps(msgs[:end]))
            yield prefix, apply(rule, prefix)


def check_prefix_stability(rule: Summarize, msgs: list[dict]) -> tuple[int, int]:
    prev: tuple[Any, Any] | None = None
    prefix_prev: Any = None
    stable = boundaries = 0
    for prefix, out in replay(rule, msgs):
        assert_valid_rewrite(prefix, out)
        note = out.notes.get("summarize", {"blocks": 0})
        if prev is not None:
            prev_out, prev_note = prev
            if note["blocks"] == prev_note["blocks"]:
                assert out.messages[:len(prev_out)] == prev_out
                stable += 1
            else:  # a boundary: earlier summaries stay, the new one is appended
                kept = len(prev_out) - (len(prefix_prev) - prev_note.get("raw_from", 0))
                assert out.messages[:kept] == prev_out[:kept]
                boundaries += 1
        prev, prefix_prev = (out.messages, note), prefix
    return stable, boundaries


def test_replay_prefixes_are_byte_identical_between_boundaries():
    stable, boundaries = check_prefix_stability(
        Summarize(SummarizeConfig(min_tokens=0, block=4), make_deps()), chat(30))
    assert stable > 0 and boundaries > 0


@needs_data("locomo_dev.jsonl")
def test_replay_on_a_real_conversation_is_stable_and_shrinks():
    with (DATA / "locomo_dev.jsonl").open() as fh:
        msgs = json.loads(fh.readline())["messages"][:330]
    rule = Summarize(SummarizeConfig(), make_deps())  # the defaults, min_tokens included
    stable, boundaries = check_prefix_stability(rule, msgs)
    assert stable >= 60 and boundaries >= 8
    out = apply(rule, msgs)
    assert COUNTER.messages(out.messages) < 0.6 * COUNTER.messages(msgs)


def test_short_requests_are_left_alone():
    msgs = chat(12)
    assert COUNTER.messages(msgs) < 8000
    assert run_rule(Summarize, msgs).messages is msgs
    assert run_rule(Summarize, msgs, min_tokens=COUNTER.messages(msgs)).messages is not msgs
