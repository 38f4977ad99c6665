"""fold_duplicates: golden cases, pattern checks, invariants as hypothesis properties."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from context_engine.proxy.engine.tokens import TokenCounter
from context_engine.rules import REGISTRY
from context_engine.rules.fold_duplicates.config import FoldDuplicatesConfig
from context_engine.rules.fold_duplicates.patterns import is_ack, normalize, parse_config_change
from context_engine.rules.fold_duplicates.rule import FoldDuplicates
from tests.harness import content, make_ctx, make_deps, run_rule

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
    assert content(out[4]).startswith("[repeats the earlier assistant message")
    assert out[6] == msgs[6]  # reordered words are not a near repeat


def test_block_alignment_keeps_the_prefix_between_boundaries() -> None:
    """Acks leave only when a block closes: growing the history by one turn keeps the prefix."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "s"}]
    seen: list[list[Any]] = []
    for turn in range(12):
        msgs = msgs + [{"role": "user", "content": "ok" if turn % 3 == 1 else f"question {turn}"}]
        seen.append(run_rule(FoldDuplicates, msgs).messages)
        msgs = msgs + [{"role": "assistant", "content": f"answer {turn}"}]
    changes = [i for i in range(1, len(seen)) if seen[i][:len(seen[i - 1])] != seen[i - 1]]
    assert changes, "acks never left the request"
    assert len(changes) <= len(seen) // 4 + 1


def test_in_an_agent_session_each_request_extends_the_one_before() -> None:
    """A text-action harness repeats its format reminder and the agent says "ok": in an
    agent session nothing already sent changes (a chat folds them when a block closes)."""
    reminder = "Please always provide EXACTLY ONE action in triple backticks, found 2 actions."
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "s"},
                                  {"role": "user", "content": "Fix the parser."}]
    sent: dict[str, list[list[Any]]] = {"agent": [], "chat": []}
    for turn in range(16):
        msgs = msgs + [{"role": "assistant", "content": f"THOUGHT {turn}\n```bash\nls d{turn}\n```"},
                       {"role": "user", "content": reminder if turn % 4 == 1 else "ok" if turn % 4 == 2
                        else f"<output>file_{turn}.py</output>"}]
        for kind, seen in sent.items():
            seen.append(run_rule(FoldDuplicates, msgs, ctx_kw={"kind": kind}).messages)
    for kind, seen in sent.items():
        changes = [i for i in range(1, len(seen)) if seen[i][:len(seen[i - 1])] != seen[i - 1]]
        assert (changes == []) == (kind == "agent"), kind
    assert [m["content"] for m in sent["agent"][-1]] == [m["content"] for m in msgs]


def test_without_system_prompt_and_with_parts_content() -> None:
    parts = [{"type": "text", "text": "ok"}, {"type": "text", "text": "ok"}]
    msgs = [{"role": "user", "content": "ok"}, {"role": "assistant", "content": "Hi."},
            {"role": "user", "content": parts}, {"role": "assistant", "content": "Yes?"},
            {"role": "user", "content": "What is my balance?"}]
    out = run_rule(FoldDuplicates, msgs, recent_turns=1, block_turns=1).messages
    assert out == msgs  # the leading "ok" is the task (pinned); a multi-part message is left alone


def test_one_text_part_folds_as_its_string() -> None:
    """A chat client's ``[{"type": "text", ...}]`` is the string it holds (the Messages and
    Responses adapters hand it over so): the ack goes, the repeat folds, in the client's form."""
    answer = ("The build failed in step 3 because the cache directory was not writable. " * 4).strip()

    def conversation(wrap: Any) -> list[dict[str, Any]]:
        return [{"role": "user", "content": "Why did the build fail?"},
                {"role": "assistant", "content": wrap(answer)}, {"role": "user", "content": wrap("ok")},
                {"role": "assistant", "content": wrap(answer)}, {"role": "user", "content": "Fix it."},
                {"role": "assistant", "content": "On it."}, {"role": "user", "content": "Thanks, go."}]

    def one_part(text: Any) -> list[dict[str, Any]]:
        return [{"type": "text", "text": text}]

    plain = run_rule(FoldDuplicates, conversation(lambda t: t), recent_turns=1, block_turns=1).messages
    msgs = conversation(one_part)
    parts = run_rule(FoldDuplicates, msgs, recent_turns=1, block_turns=1).messages
    assert len(parts) == len(plain) < len(msgs)
    for p, q in zip(parts, plain):
        assert p["content"] in (q["content"], one_part(q["content"]))
    assert parts[1] is msgs[1]  # the first answer stays the client's own object
    assert plain[2]["content"] != answer  # the repeat folded, and the ack went
    assert parts[2]["content"] == one_part(plain[2]["content"])


def test_tool_arguments_that_are_not_json_compare_as_text() -> None:
    big = "line of build output\n" * 30
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "build twice"}]
    for cid, args in (("c1", "make all"), ("c2", "make all"), ("c3", "make test")):
        msgs += [{"role": "assistant", "content": None, "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": "sh", "arguments": args}}]},
            {"role": "tool", "tool_call_id": cid, "content": big}]
    out = run_rule(FoldDuplicates, msgs).messages
    assert [m["content"] for m in out if m["role"] == "tool"] == [
        big, "[same result as tool call c1 above]", big]
