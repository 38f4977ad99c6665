"""budget: golden cases, drop order, the never-drop set, the model window, properties."""

from __future__ import annotations

import asyncio
import importlib.util
import json

import yaml

from context_engine.proxy.billing.pricing import context_window
from context_engine.proxy.engine.messages import SUMMARY_HEADER
from context_engine.proxy.engine.originals import stored_original
from context_engine.proxy.engine.tokens import TokenCounter
from context_engine.rules.budget import Budget, BudgetConfig
from tests.harness import assert_valid_rewrite, content, make_ctx, make_deps, run_rule

COUNTER = TokenCounter("o200k_base")


def history() -> list[dict]:
    big = json.dumps({"rows": [{"id": f"R{i}", "v": i * 7} for i in range(40)]})
    return [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Old question about the weather in Paris last week."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "rows", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": big},
        {"role": "user", "content": SUMMARY_HEADER + "\nconfirmed_facts:\n- user: id is R7\n"
                                    "- user: budget is $500\npending_tasks:\n- user: book HAT069"},
        {"role": "user", "content": "[context-engine:memory]\n- the user flies on May 20"},
        {"role": "assistant", "content": "Noted, I will keep all of that in mind."},
        {"role": "user", "content": "Book it now."},
    ]


def drops_at(budget: int) -> tuple[list[str], int]:
    out = run_rule(Budget, history(), max_input_tokens=budget)
    assert_valid_rewrite(history(), out)
    note = out.notes["budget"]
    return [d["kind"] for d in note["dropped"]], note["after"]


def test_drop_order_follows_the_priority_list():
    # Each budget is one token under what the previous step reached, so each adds a step.
    budget = COUNTER.messages(history()) - 1
    expected = [["tool_output"], ["tool_output", "snippet"],
                ["tool_output", "snippet", "summary_detail"],
                ["tool_output", "snippet", "summary_detail", "summary"],
                # the task (the first user message) is pinned: the tool-call unit goes instead
                ["tool_output", "snippet", "summary_detail", "summary", "turn", "turn"]]
    for want in expected:
        kinds, after = drops_at(budget)
        assert kinds == want
        budget = after - 1
    floor = run_rule(Budget, history(), max_input_tokens=1).notes["budget"]["could_reach"]
    out = run_rule(Budget, history(), max_input_tokens=floor)
    # all else went: the system prompt, the task, the reply keeping the two user turns apart
    assert out.messages == [history()[0], history()[1], history()[-2], history()[-1]]


def test_what_cannot_fit_is_forwarded_as_sent_and_recorded():
    msgs = history()
    out = run_rule(Budget, msgs, max_input_tokens=1)
    note = out.notes["budget"]
    assert note["fits"] is False and note["dropped_count"] == 0 and 1 < note["could_reach"]
    assert out.messages == msgs  # the upstream's own error reaches the client


def test_a_task_larger_than_the_budget_goes_out_whole():
    task = {"role": "user", "content": "Refactor the parser. " * 400}
    msgs = [{"role": "system", "content": "You are an agent."}, task,
            {"role": "assistant", "content": "Old reply. " * 50}, {"role": "user", "content": "Go."}]
    out = run_rule(Budget, msgs, max_input_tokens=500)
    assert out.messages == msgs and out.notes["budget"]["fits"] is False


def test_dropped_tool_outputs_are_kept_in_the_store():
    deps = make_deps()
    out = run_rule(Budget, history(), deps=deps, max_input_tokens=COUNTER.messages(history()) - 1)
    stub = content(out.messages[3])
    oid = stub.rsplit("orig:", 1)[1]
    assert stored_original(deps.store, "orig:" + oid, scope="") == history()[3]["content"]


def test_the_budget_comes_from_the_model_window_minus_max_tokens():
    assert context_window("gpt-4o") == 128000
    assert context_window("openai/gpt-4o") == 128000
    assert context_window("no-such-model-anywhere") == 0
    rule = Budget(BudgetConfig(), make_deps())
    ctx = make_ctx(history(), model="gpt-4o", max_tokens=128000 - 100)
    out = asyncio.run(rule.apply(ctx))
    assert out.notes["budget"]["budget"] == 100 and out.notes["budget"]["dropped_count"] > 0
    unknown = asyncio.run(rule.apply(make_ctx(history(), model="no-such-model-anywhere")))
    assert unknown.messages is unknown.messages and unknown.notes["budget"]["budget"] == 0


def test_tool_definitions_count_and_are_never_touched():
    tools = [{"type": "function", "function": {"name": "rows", "description": "x " * 300,
                                               "parameters": {"type": "object"}}}]
    msgs = history()
    plain = COUNTER.request(msgs)
    out = run_rule(Budget, msgs, ctx_kw={"tools": tools}, max_input_tokens=plain)
    assert out.tools == tools
    assert out.notes["budget"]["tokens"] == COUNTER.request(msgs, tools)
    assert out.notes["budget"]["dropped_count"] > 0


def test_a_unit_with_stubbed_and_raw_results_loses_only_the_raw_ones():
    msgs = history()
    msgs[2] = {**msgs[2], "tool_calls": [*msgs[2]["tool_calls"], {
        "id": "c2", "type": "function", "function": {"name": "rows", "arguments": "{}"}}]}
    stub = "[tool_json: unused rows result; original: orig:0123456789ab]"
    msgs.insert(4, {"role": "tool", "tool_call_id": "c2", "content": stub})
    out = run_rule(Budget, msgs, max_input_tokens=COUNTER.messages(msgs) - 1)
    assert out.messages[4] == msgs[4] and content(out.messages[3]).startswith("[context-engine:")
    assert_valid_rewrite(msgs, out)


def test_no_model_map_means_no_derived_budget(monkeypatch):
    from context_engine.proxy.billing import pricing

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert pricing.price_map.__wrapped__() == {}


def test_summarize_then_budget_through_the_engine(tmp_path):
    from context_engine.proxy.engine.engine import Engine
    from context_engine.proxy.settings import load_settings

    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"rule_options": {
        "summarize": {"min_tokens": 0, "block": 4}, "budget": {"max_input_tokens": 300}}}))
    # a chat with one tool call (an agent session keeps every user turn: they are pinned)
    settings = load_settings(flags={"rules": "summarize,budget", "store": "memory://",
                                    "session_kind": "chat"}, env={}, config_path=str(config))
    msgs = history() + [{"role": "assistant", "content": f"Reply {i} about booking HAT0{i}."}
                        if i % 2 else {"role": "user", "content": f"Question {i} on HAT0{i}?"}
                        for i in range(1, 20)]
    result = asyncio.run(Engine(settings).rewrite({"model": "gpt-4o", "messages": msgs}, "s1")).result
    assert not result.failed_open and not any(j.error for j in result.journal)
    assert [j.rule for j in result.journal] == ["summarize", "budget"]
    assert result.journal[-1].tokens_after <= 300 < result.tokens_before
    # recall's marker line (and the reply that keeps two user turns apart) come after the rules
    assert result.tokens_after <= 300 + 40


def test_an_agent_that_compacts_on_the_providers_error_gets_its_messages_as_sent():
    """Claude Code compacts when the provider rejects a request as too long: an original
    over the budget goes out as it came, an earlier rule's cut undone, so that error
    reaches it at the request where it would direct. Within the budget, for other agents,
    or with ``as_sent_agents`` empty, the rule trims as before."""
    msgs = history()
    cut = [*msgs[:3], {**msgs[3], "content": "[clipped]"}, *msgs[4:]]  # an earlier rule's work
    over = COUNTER.messages(msgs) - 1
    assert COUNTER.messages(cut) < over

    def apply(messages, agent, budget=over, agents="claude"):
        rule = Budget(BudgetConfig(max_input_tokens=budget, as_sent_agents=agents), make_deps())
        return asyncio.run(rule.apply(make_ctx(messages, original=msgs, agent=agent)))

    out = apply(cut, "claude")
    assert out.messages is msgs
    assert out.notes["budget"] == {"budget": over, "tokens": over + 1, "fits": False, "as_sent": "claude"}
    assert apply(msgs, "claude").messages is msgs  # not trimmed either
    assert apply(cut, "codex").messages is cut  # the cut fits: it stands
    assert apply(cut, "claude", budget=over + 10).messages is cut  # the original fits too
    assert apply(msgs, "codex").notes["budget"]["dropped_count"] > 0
    assert apply(msgs, "claude", agents="").notes["budget"]["dropped_count"] > 0


def test_as_sent_means_over_the_models_window_not_over_window_less_max_tokens(monkeypatch):
    """Past window - max_tokens the provider answers "input length and max_tokens exceed
    context limit", and Claude Code lowers max_tokens: no compaction, so the cut stands
    there; past the window itself ("prompt is too long") the request goes as sent."""
    from context_engine.rules import budget as module

    msgs = history()
    total = COUNTER.messages(msgs)
    rule = Budget(BudgetConfig(), make_deps())
    for window, as_sent in ((total + 50, False), (total - 1, True)):
        monkeypatch.setattr(module, "context_window", lambda model, w=window: w)
        out = asyncio.run(rule.apply(make_ctx(msgs, original=msgs, agent="claude", max_tokens=200)))
        assert (out.messages is msgs) is as_sent
        assert out.notes["budget"].get("as_sent") == ("claude" if as_sent else None)
