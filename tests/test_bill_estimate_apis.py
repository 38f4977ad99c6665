"""The counterfactual bill for Responses and Anthropic Messages rows, through the real
server, the real SDKs and the loopback mock (which caches a prefix of the client's own
items or messages, markers left out, from 1,024 tokens in 128-token steps; for
Anthropic requests with a ``cache_control`` everything it does not read is written)."""

from __future__ import annotations

import anthropic

from context_engine.proxy.reporting.aggregate import overall
from tests.fakes.rules import FoldEveryThirdKeepingRoles
from tests.test_bill_estimate import _text, conversation

CC = {"type": "ephemeral"}


def _responses(proxy, requests, session: str):
    client = proxy.client(default_headers={"X-Session-Id": session})
    for msgs in requests:
        client.responses.create(model="gpt-5", instructions=msgs[0]["content"], input=msgs[1:])
    return [r for r in proxy.rows() if r["session"].startswith(session + "~")]


def _as_anthropic(msgs):
    """Claude Code's shape: a marked system block, text blocks, the newest one marked."""
    out = [{"role": m["role"], "content": [{"type": "text", "text": m["content"]}]} for m in msgs[1:]]
    out[-1]["content"][-1]["cache_control"] = CC
    return [{"type": "text", "text": msgs[0]["content"], "cache_control": CC}], out


def _anthropic(proxy, requests, session: str):
    client = anthropic.Anthropic(base_url=proxy.url, api_key="sk-ant-test", max_retries=0,
                                 default_headers={"X-Session-Id": session})
    for msgs in requests:
        system, messages = _as_anthropic(msgs)
        client.messages.create(model="claude-sonnet-4-5", max_tokens=64, system=system, messages=messages)
    return [r for r in proxy.rows() if r["session"].startswith(session + "~")]


def test_responses_rows_estimate_the_original_like_the_bill(start_proxy):
    rows = _responses(start_proxy(), conversation(8, "resp"), "resp")
    assert [(r["api"], r["billing"]) for r in rows] == [("responses", "openai")] * 8
    assert rows[0]["est_cached_original"] == 0 and rows[-1]["est_cached_original"] > 3000
    total = overall(rows)
    assert total.original_estimate == 8 and abs(total.cost_original / total.cost_actual - 1) < 0.05
    assert total.cache_breaks == 0 and rows[-1]["prefix_kept_tokens"] > 3000


def test_responses_rewrite_is_priced_against_the_original_cache(start_proxy):
    rows = _responses(start_proxy(rules=[FoldEveryThirdKeepingRoles()]), conversation(9, "resp-fold"), "resp-fold")
    breaks = [r for r in rows if r["prefix_break_index"] is not None]
    assert breaks and {r["prefix_break_rule"] for r in breaks} == {"fold_every_third"}
    for r in breaks:  # the original kept its prefix: the estimate reads what the rewrite missed
        assert r["est_cached_original"] > r["cached_tokens"]


def test_responses_with_server_held_history_take_the_billed_reads(start_proxy):
    proxy = start_proxy()
    client = proxy.client(default_headers={"X-Session-Id": "prev"})
    first = client.responses.create(model="gpt-5", input="Question: " + _text(1, 900))
    client.responses.create(model="gpt-5", previous_response_id=first.id, input="And then?")
    row = proxy.rows()[-1]
    assert row["billing"] == "openai" and row["est_cached_original"] == row["cached_tokens"]
    assert row["prefix_break_index"] is None


def test_anthropic_rows_estimate_reads_and_writes_from_the_breakpoints(start_proxy):
    rows = _anthropic(start_proxy(), conversation(8, "ant"), "ant")
    assert [(r["api"], r["billing"]) for r in rows] == [("anthropic", "anthropic")] * 8
    assert rows[0]["est_cached_original"] == rows[0]["est_write_original"] == 0  # under 1,024
    assert rows[-1]["est_cached_original"] > 3000
    for r in rows[2:]:  # message boundaries and token counts vs the mock's JSON tokens in
        # 128-token steps (the mock also caches the first request, under the 1,024 minimum)
        assert abs(r["est_cached_original"] - r["cached_tokens"]) < 0.05 * r["prompt_tokens"]
        assert abs(r["est_write_original"] - r["cache_write_tokens"]) < 0.05 * r["prompt_tokens"]
    total = overall(rows)
    assert total.original_estimate == 8 and abs(total.cost_original / total.cost_actual - 1) < 0.05


def test_anthropic_rewrite_keeps_the_newest_breakpoint_and_is_priced_against_the_original(start_proxy, mock):
    rows = _anthropic(start_proxy(rules=[FoldEveryThirdKeepingRoles()]), conversation(9, "ant-fold"), "ant-fold")
    sent = mock.received[-1].json()
    assert sent["messages"][-1]["content"][-1]["cache_control"] == CC
    breaks = [r for r in rows if r["prefix_break_index"] is not None]
    assert breaks and {r["prefix_break_rule"] for r in breaks} == {"fold_every_third"}
    for r in breaks:
        assert r["est_cached_original"] > r["cached_tokens"]
        assert r["cache_write_tokens"] > r["est_write_original"]  # the rewrite re-writes its tail
