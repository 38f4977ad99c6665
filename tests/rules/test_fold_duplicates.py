"""fold_duplicates: golden cases, pattern checks, invariants as hypothesis properties."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from context_engine.proxy.engine.invariants import rewrite_problems
from context_engine.proxy.engine.messages import last_user_index, system_prefix_len
from context_engine.proxy.engine.tokens import TokenCounter
from context_engine.rules import REGISTRY
from context_engine.rules.fold_duplicates.patterns import is_ack, normalize, parse_config_change
from context_engine.rules.fold_duplicates.rule import FoldDuplicates, FoldDuplicatesConfig
from tests.harness import make_ctx, make_deps, run_rule

COUNTER = TokenCounter("o200k_base")


def test_registered_under_its_name() -> None:
    assert REGISTRY["fold_duplicates"] is FoldDuplicates
    assert FoldDuplicates.name == "fold_duplicates"


def test_unchanged_request_returns_the_same_context() -> None:
    ctx = make_ctx([{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}])
    rule = FoldDuplicates(FoldDuplicatesConfig(), make_deps())
    assert asyncio.run(rule.apply(ctx)) is ctx


def test_bad_options_are_rejected() -> None:
    with pytest.raises(ValueError, match="tool_match"):
        FoldDuplicatesConfig(tool_match="name")
    with pytest.raises(ValueError, match="block_turns"):
        FoldDuplicatesConfig(block_turns=0)


@pytest.mark.parametrize("text", ["ok", "OK!", "thanks", "Thank you so much!", "got it",
                                  "ok thanks", "嗯", "好的，谢谢", "稍等", "收到！"])
def test_fillers_are_acks(text: str) -> None:
    assert is_ack(text, 40)


@pytest.mark.parametrize("text", ["ok?", "no", "yes", "ok, cancel it", "thanks, and the refund?",
                                  "好的，帮我取消订单", "ok " * 20])
def test_non_fillers_are_not_acks(text: str) -> None:
    assert not is_ack(text, 40)


def test_normalize_keeps_signs_and_inner_punctuation() -> None:
    assert normalize("Hello,  WORLD!") == normalize("hello world")
    assert normalize("-5 degrees") != normalize("5 degrees")
    assert normalize("3.5") != normalize("35")


@pytest.mark.parametrize("text,key,value", [
    ("Make the theme red.", "theme", "red"),
    ("please set the background color to dark blue", "background color", "dark blue"),
    ("把主题改成红色", "主题", "红色"),
    ("no, blue", "", "blue"),
    ("还是改成蓝色吧", "", "蓝色"),
])
def test_config_changes_are_parsed(text: str, key: str, value: str) -> None:
    change = parse_config_change(text)
    assert change is not None and (change.key, change.value) == (key, value)


@pytest.mark.parametrize("text", [
    "Switch from Baidu to Bing.", "switch the search engine from Bing to Google",
    "从百度切换到必应", "Set the theme to red and the font to Arial", "make it red",
    "no, thanks", "Set it to 5", "Please set the alarm for 7am tomorrow and remind me",
])
def test_object_switches_and_compound_changes_are_not_config(text: str) -> None:
    assert parse_config_change(text) is None


def test_near_repeats_are_off_by_default_and_need_an_in_order_subset() -> None:
    words = " ".join(f"w{i}" for i in range(40))
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "go"},
            {"role": "assistant", "content": words + " note"},
            {"role": "user", "content": "again"},
            {"role": "assistant", "content": words},
            {"role": "user", "content": "and now"},
            {"role": "assistant", "content": "w1 w0 " + " ".join(f"w{i}" for i in range(2, 40))},
            {"role": "user", "content": "end"}]
    assert run_rule(FoldDuplicates, msgs).messages == msgs
    out = run_rule(FoldDuplicates, msgs, near_jaccard=0.9).messages
    assert out[4]["content"].startswith("[repeats the earlier assistant message")
    assert out[6] == msgs[6]  # reordered words are not a near repeat


def test_block_alignment_keeps_the_prefix_between_boundaries() -> None:
    """Acks leave only when a block closes: growing the history by one turn keeps the prefix."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "s"}]
    seen: list[list[dict[str, Any]]] = []
    for turn in range(12):
        msgs = msgs + [{"role": "user", "content": "ok" if turn % 3 == 1 else f"question {turn}"}]
        seen.append(run_rule(FoldDuplicates, msgs).messages)
        msgs = msgs + [{"role": "assistant", "content": f"answer {turn}"}]
    changes = [i for i in range(1, len(seen)) if seen[i][:len(seen[i - 1])] != seen[i - 1]]
    assert changes, "acks never left the request"
    assert len(changes) <= len(seen) // 4 + 1


# --- properties ---------------------------------------------------------------------------

TEXTS = st.sampled_from([
    "ok", "thanks!", "好的", "嗯", "Make the theme red.", "no, blue", "Set the theme to green",
    "Switch from Bing to Google.", "What is my balance?", "Shall I proceed?",
    "Please cancel reservation XEWRD9 because my business trip to Atlanta was called off today.",
    "please cancel reservation XEWRD9, because my business trip to Atlanta was called off today",
    "Here is the full itinerary you asked for, with flights HAT030 and HAT223 on May 13.",
])
SETTINGS = st.sampled_from([
    "Make the theme red.", "no, blue", "Set the theme to green", "把主题改成红色", "还是改成蓝色吧",
    "Set the font to Arial", "Switch from Bing to Google.", "ok",
])
OUTPUTS = st.sampled_from([
    "[]", "ok", json.dumps({"reservation_id": "XEWRD9", "flights": ["HAT030", "HAT223"],
                            "payment_history": [{"payment_id": "gift_card_4643416"}]}),
    "Error: flight HAT030 not available on date 2024-05-13 for the selected cabin class.",
])


@st.composite
def conversations(draw: Any) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are an airline agent."}]
    n_calls = 0
    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["user", "assistant", "tools"]))
        if kind == "tools":
            k = draw(st.integers(1, 2))
            ids = [f"call_{n_calls + j}" for j in range(k)]
            n_calls += k
            name = draw(st.sampled_from(["get_reservation_details", "search"]))
            args = json.dumps({"id": draw(st.sampled_from(["A", "B"]))})
            msgs.append({"role": "assistant", "content": draw(st.one_of(st.none(), TEXTS)),
                         "tool_calls": [{"id": i, "type": "function",
                                         "function": {"name": name, "arguments": args}}
                                        for i in ids]})
            msgs += [{"role": "tool", "tool_call_id": i, "content": draw(OUTPUTS)} for i in ids]
        elif kind == "user":
            msgs.append({"role": kind, "content": draw(st.one_of(TEXTS, SETTINGS))})
        else:
            msgs.append({"role": kind, "content": draw(TEXTS)})
    if draw(st.booleans()):
        msgs.append({"role": "user", "content": draw(TEXTS)})
    return msgs


@st.composite
def settings_chats(draw: Any) -> list[dict[str, Any]]:
    """Users adjusting settings (mostly), with short replies: supersede and ack folds."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a settings assistant."}]
    for _ in range(draw(st.integers(2, 10))):
        msgs.append({"role": "user", "content": draw(st.one_of(SETTINGS, SETTINGS, TEXTS))})
        if draw(st.booleans()):
            msgs.append({"role": "assistant", "content": draw(st.sampled_from(["Done.", "ok"]))})
    return msgs


CHATS = st.one_of(conversations(), settings_chats())
OPTIONS = st.fixed_dictionaries({
    "recent_turns": st.integers(0, 3), "block_turns": st.integers(1, 4),
    "repeats_in_window": st.booleans(), "tool_match": st.sampled_from(["call", "output"]),
    "near_jaccard": st.sampled_from([0.0, 0.8]), "min_saving": st.integers(0, 6)})
PROPERTY = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(CHATS, OPTIONS)
def test_rewrite_is_valid_shrinks_and_keeps_protected_turns(msgs: list[dict[str, Any]],
                                                            options: dict[str, Any]) -> None:
    original = copy.deepcopy(msgs)
    out = run_rule(FoldDuplicates, msgs, **options).messages
    assert rewrite_problems(original, out) == []
    head = system_prefix_len(original)
    assert out[:head] == original[:head]
    lu = last_user_index(original)
    if lu >= 0:
        assert out[last_user_index(out)] == original[lu]
    assert COUNTER.messages(out) <= COUNTER.messages(original)
    calls = {c["id"] for m in out for c in m.get("tool_calls") or ()}
    results = [m["tool_call_id"] for m in out if m.get("role") == "tool"]
    assert sorted(calls) == sorted(results)


@PROPERTY
@given(CHATS, OPTIONS)
def test_applying_twice_changes_nothing_more(msgs: list[dict[str, Any]],
                                            options: dict[str, Any]) -> None:
    once = run_rule(FoldDuplicates, msgs, **options).messages
    assert run_rule(FoldDuplicates, once, **options).messages == once


@PROPERTY
@given(CHATS, OPTIONS)
def test_same_input_same_output(msgs: list[dict[str, Any]], options: dict[str, Any]) -> None:
    assert run_rule(FoldDuplicates, msgs, **options).messages == \
        run_rule(FoldDuplicates, copy.deepcopy(msgs), **options).messages


def test_without_system_prompt_and_with_parts_content() -> None:
    parts = [{"type": "text", "text": "ok"}]
    msgs = [{"role": "user", "content": "ok"}, {"role": "assistant", "content": "Hi."},
            {"role": "user", "content": parts}, {"role": "assistant", "content": "Yes?"},
            {"role": "user", "content": "What is my balance?"}]
    out = run_rule(FoldDuplicates, msgs, recent_turns=1, block_turns=1).messages
    assert out == msgs[1:]  # the leading "ok" goes; a multi-part message is left alone


def test_tool_arguments_that_are_not_json_compare_as_text() -> None:
    big = "line of build output\n" * 30
    msgs = [{"role": "user", "content": "build twice"}]
    for cid, args in (("c1", "make all"), ("c2", "make all"), ("c3", "make test")):
        msgs += [{"role": "assistant", "content": None, "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": "sh", "arguments": args}}]},
            {"role": "tool", "tool_call_id": cid, "content": big}]
    out = run_rule(FoldDuplicates, msgs).messages
    assert [m["content"] for m in out if m["role"] == "tool"] == [
        big, "[same result as tool call c1 above]", big]
