"""The LLM summarizer against a loopback mock upstream (real HTTP through litellm), its
reply validation, and the fallback to rule-based slots on bad JSON or a timeout."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from context_engine.proxy.engine.messages import SUMMARY_HEADER
from context_engine.rules.summarize.llm import LiteLLMSummarizer, parse_slots, transcript
from context_engine.rules.summarize.rule import Summarize, SummarizeConfig
from context_engine.rules.summarize.slots import Slots
from tests.fakes.upstreams import ChatUpstream, completion
from tests.harness import assert_valid_rewrite, make_ctx, make_deps

SLOT_JSON = {"confirmed_facts": ["user id mia_li_3668", "flight HAT069 on 2024-05-20"],
             "preferences": ["aisle seat"], "decisions": [], "pending_tasks": ["add a bag"],
             "revocations": []}


async def _answer(up: ChatUpstream, body: dict[str, Any]) -> dict[str, Any]:
    """Slots as JSON (``mode`` ``slots``, or ``slow``: 1.5 s late), else prose."""
    if up.mode == "slow":
        await asyncio.sleep(1.5)
    return completion(json.dumps(SLOT_JSON) if up.mode in ("slots", "slow") else "Sorry, I cannot.")


@pytest.fixture()
def upstream(monkeypatch: pytest.MonkeyPatch) -> Iterator[ChatUpstream]:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-loopback")
    with ChatUpstream(_answer, mode="slots") as server:
        yield server


def chat() -> list[dict]:
    msgs = [{"role": "system", "content": "You are a travel agent."}]
    for i in range(4):
        msgs.append({"role": "user", "content": f"My user ID is mia_li_3668; please book flight "
                     f"HAT069 on 2024-05-20 and add bag number {i}."})
        msgs.append({"role": "assistant", "content": f"I will book HAT069 and add bag {i}."})
    msgs.append({"role": "user", "content": "Done?"})
    return msgs


# a generous timeout where the model answers: under a loaded CI machine the first call
# (litellm imported lazily inside it) took over 10 s and fell back, failing the test
def summarize_with(server: ChatUpstream, timeout: float = 60.0) -> Any:
    config = SummarizeConfig(min_tokens=0, window=2, block=4, summary_model="openai/mock-model",
                             summary_api_base=server.url + "/v1",
                             summary_timeout=timeout)
    rule = Summarize(config, make_deps())
    return asyncio.run(rule.apply(make_ctx(chat())))


@pytest.mark.slow
def test_the_model_fills_the_slots_once_per_block(upstream):
    out = summarize_with(upstream)
    assert_valid_rewrite(chat(), out)
    summary = next(m["content"] for m in out.messages if m["content"].startswith(SUMMARY_HEADER))
    assert "- flight HAT069 on 2024-05-20" in summary and "- aisle seat" in summary
    assert out.notes["summarize"]["llm_blocks"] == 1
    sent = upstream.requests[0]
    assert sent["model"] == "mock-model" and "pending_tasks" in sent["messages"][0]["content"]
    assert "user: My user ID is mia_li_3668" in sent["messages"][1]["content"]


@pytest.mark.parametrize("mode,timeout", [("prose", 60.0), ("slow", 0.3)])
def test_bad_json_or_a_timeout_falls_back_to_the_rules(upstream, mode, timeout):
    upstream.mode = mode
    out = summarize_with(upstream, timeout)
    rules = Summarize(SummarizeConfig(min_tokens=0, window=2, block=4), make_deps())
    rules_only = asyncio.run(rules.apply(make_ctx(chat())))
    assert out.notes["summarize"]["llm_blocks"] == 0
    assert out.messages == rules_only.messages


def test_parse_slots_validates_the_reply():
    assert parse_slots(json.dumps(SLOT_JSON)) == Slots(
        confirmed_facts=("user id mia_li_3668", "flight HAT069 on 2024-05-20"),
        preferences=("aisle seat",), pending_tasks=("add a bag",))
    fenced = "```json\n" + json.dumps({"decisions": "go with HAT069", "extra": 1}) + "\n```"
    assert parse_slots(fenced) == Slots(decisions=("go with HAT069",))
    assert parse_slots("not json") is None
    assert parse_slots("[1, 2]") is None
    assert parse_slots(json.dumps({"unrelated": []})) is None
    assert parse_slots(json.dumps({"decisions": {"a": 1}})) is None
    long = parse_slots(json.dumps({"confirmed_facts": ["x " * 300] * 40, "decisions": [{"a": 1}]}))
    assert long is not None and len(long.confirmed_facts) == 12
    assert all(len(x) <= 200 for x in long.confirmed_facts) and long.decisions == ('{"a": 1}',)


def test_transcript_shows_calls_and_results():
    msgs: list[Any] = [{"role": "user", "content": "Find ZFA04Y."},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
             "function": {"name": "get", "arguments": '{"id": "ZFA04Y"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "{\"status\": \"ok\"}"}]
    assert transcript(msgs) == ('user: Find ZFA04Y.\nassistant calls get({"id": "ZFA04Y"})\n'
                                'tool result: {"status": "ok"}')


def test_the_summarizer_kind_names_the_model():
    assert LiteLLMSummarizer("openai/x").kind == "llm:openai/x"
