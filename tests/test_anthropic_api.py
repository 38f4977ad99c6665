"""Anthropic Messages through the proxy, driven by the real anthropic SDK against the
loopback mock (real JSON bodies and event streams, signed thinking blocks)."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import pytest

from tests.fakes.rules import DropOldAssistant

TOOLS = [{"name": "lookup", "description": "Look up a fact.",
          "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}}]
THINKING = {"type": "thinking", "thinking": "The user wants Spain.", "signature": "EqQBsig+/=="}
HISTORY = [
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "4"},
    {"role": "user", "content": [{"type": "text", "text": "Look up the capital of France.",
                                  "cache_control": {"type": "ephemeral"}}]},
    {"role": "assistant", "content": [THINKING, {"type": "tool_use", "id": "toolu_1", "name": "lookup",
                                                 "input": {"query": "capital of France"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                  "content": '{"capital": "Paris"}'},
                                 {"type": "text", "text": "And of Spain?"}]},
]


def client(proxy, key="sk-ant-test", **kw):
    return anthropic.Anthropic(base_url=proxy.url, api_key=key, max_retries=0, **kw)


def test_create_tool_loop_with_thinking(start_proxy, mock):
    proxy = start_proxy()
    c = client(proxy)
    messages: list[Any] = [{"role": "user", "content": "Find the answer."}]
    for turn in range(4):
        msg = c.messages.create(model="claude-sonnet-4-5", max_tokens=1024, messages=messages,
                                tools=TOOLS, thinking={"type": "enabled", "budget_tokens": 1024})
        if msg.stop_reason != "tool_use":
            break
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]})
        results = [{"type": "tool_result", "tool_use_id": b.id, "content": json.dumps({"answer": 42})}
                   for b in msg.content if b.type == "tool_use"]
        messages.append({"role": "user", "content": results + (
            [{"type": "text", "text": "go on"}] if turn == 0 else [])})
    assert msg.content[-1].text.startswith("Mock reply to") and turn == 2
    sent = mock.received[-1]
    assert sent.path == "/v1/messages" and "sk-ant-test" in sent.headers["authorization"]
    assert sent.headers["anthropic-version"]
    signatures = [b["signature"] for m in sent.json()["messages"] if m["role"] == "assistant"
                  for b in m["content"] if b["type"] == "thinking"]
    assert len(signatures) == 2
    rows = proxy.rows()[-3:]
    assert [r["api"] for r in rows] == ["anthropic"] * 3
    assert rows[-1]["encoding"] == "o200k_base" and rows[-1]["encoding_fallback"] == 1
    assert rows[-1]["prompt_tokens"] > 0 and rows[-1]["completion_tokens"] == 9
    assert rows[-1]["finish_reason"] == "end_turn"


def test_stream_helper_and_usage_with_cache(start_proxy, mock):
    proxy = start_proxy()
    c = client(proxy, default_headers={"anthropic-beta": "prompt-caching-2024-07-31"})
    with c.messages.stream(model="claude-sonnet-4-5", max_tokens=256, messages=HISTORY,
                           system=[{"type": "text", "text": "Be brief.",
                                    "cache_control": {"type": "ephemeral"}}]) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "Mock reply to 7 messages." and final.usage.output_tokens == 9
    assert mock.received[-1].headers["anthropic-beta"] == "prompt-caching-2024-07-31"
    row = proxy.rows()[-1]
    u = final.usage
    assert row["stream"] == 1 and row["completion_tokens"] == 9
    assert row["prompt_tokens"] == u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens
    assert row["cached_tokens"] == u.cache_read_input_tokens
    assert row["cache_write_tokens"] == u.cache_creation_input_tokens > 0


def test_stream_bytes_equal_the_upstream_bytes(start_proxy, mock):
    proxy = start_proxy()
    body = {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": HISTORY, "tools": TOOLS,
            "stream": True, "thinking": {"type": "enabled", "budget_tokens": 1024}}
    direct = httpx.post(mock.url + "/v1/messages", json=body).content
    via = httpx.post(proxy.url + "/v1/messages", json=body).content
    assert via == direct and via.rstrip().endswith(b'data: {"type": "message_stop"}')


def test_rewrite_keeps_thinking_and_cache_control_byte_identical(start_proxy, mock):
    proxy = start_proxy(rules=[DropOldAssistant()])
    body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 64, "system": "Be brief.",
                       "messages": HISTORY, "tools": TOOLS}, indent=2).encode()
    r = httpx.post(proxy.url + "/v1/messages", content=body)
    assert r.status_code == 200
    got = mock.received[-1].body
    sent = json.loads(got)["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user", "assistant", "user"]
    assert got != body and "…" in json.dumps(sent[1]["content"], ensure_ascii=False)
    assert sent[0]["content"] == "What is 2+2?"
    assert sent[2]["content"][0]["cache_control"] == {"type": "ephemeral"}
    thinking = json.dumps(THINKING, indent=2).replace("\n", "\n        ").encode()
    assert thinking in body and thinking in got
    assert got.startswith(body.split(b'"messages":')[0]) and got.endswith(body.split(b'"tools":')[1])


def test_headers_pass_and_sessions_are_scoped_by_x_api_key(start_proxy, mock):
    proxy = start_proxy()
    body = {"model": "claude-haiku-4-5", "max_tokens": 8, "messages": HISTORY[:1]}
    for key in ("sk-ant-one", "sk-ant-two", "sk-ant-one"):
        httpx.post(proxy.url + "/v1/messages", json=body, headers={
            "x-api-key": key, "anthropic-version": "2023-06-01", "anthropic-beta": "b1,b2"})
        sent = mock.received[-1].headers
        assert (sent["x-api-key"], sent["anthropic-version"], sent["anthropic-beta"]) == (
            key, "2023-06-01", "b1,b2")
    a, b, c = proxy.rows()[-3:]
    assert a["session"] != b["session"] and a["session"] == c["session"]


@pytest.mark.parametrize("body", [
    b"{not json",
    b'{"model": "claude-sonnet-4-5", "max_tokens": 5}',
    b'{"model": "claude-sonnet-4-5", "messages": [{"role": 5, "content": "x"}]}',
    b'{"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": 5}]}',
    b'{"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": [{"text": "no type"}]}]}',
    b'{"model": "claude-sonnet-4-5", "system": 3, "messages": [{"role": "user", "content": "x"}]}',
])
def test_bad_requests_answer_400_in_anthropic_shape(start_proxy, mock, body):
    proxy = start_proxy()
    before = len(mock.received)
    r = httpx.post(proxy.url + "/v1/messages", content=body)
    assert r.status_code == 400 and len(mock.received) == before
    err = r.json()
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert isinstance(err["error"]["message"], str)


def test_sdk_raises_its_own_error_type_on_a_bad_request(start_proxy):
    proxy = start_proxy()
    with pytest.raises(anthropic.BadRequestError) as info:
        client(proxy).messages.create(model="claude-sonnet-4-5", max_tokens=8,
                                      messages=[{"role": "user", "content": [{"text": "x"}]}])
    assert isinstance(info.value.body, dict)
    assert info.value.body["error"]["type"] == "invalid_request_error"


def test_unknown_blocks_pass_and_side_routes_are_untouched(start_proxy, mock):
    proxy = start_proxy(rules=[DropOldAssistant()])
    odd = {"type": "future_block", "data": [1, 2.50]}
    messages = HISTORY[:2] + [{"role": "user", "content": [odd, {"type": "text", "text": "hi"}]}]
    body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": messages}).encode()
    assert httpx.post(proxy.url + "/v1/messages", content=body).status_code == 200
    assert json.dumps(odd).encode() in mock.received[-1].body
    for path in ("/v1/messages/count_tokens", "/v1/messages/batches"):
        payload = b'{"model":"claude-sonnet-4-5",  "messages":[]}'
        r = httpx.post(proxy.url + path, content=payload, headers={"x-api-key": "k"})
        assert r.json()["echo"]["path"] == path and mock.received[-1].body == payload


COMPACT = {"context_management": {"edits": [{"type": "compact_20260112"}]}}


def _billed(usage: dict) -> tuple[int, int, int, int]:
    steps = usage["iterations"]
    total = {k: sum(s[k] for s in steps) for k in ("input_tokens", "cache_read_input_tokens",
                                                    "cache_creation_input_tokens", "output_tokens")}
    return (total["input_tokens"] + total["cache_read_input_tokens"] + total["cache_creation_input_tokens"],
            total["cache_read_input_tokens"], total["cache_creation_input_tokens"], total["output_tokens"])


def _row_usage(row: dict) -> tuple[int, int, int, int]:
    return row["prompt_tokens"], row["cached_tokens"], row["cache_write_tokens"], row["completion_tokens"]


def test_usage_iterations_of_server_side_compaction_are_billed(start_proxy, mock):
    proxy = start_proxy()
    c = client(proxy, default_headers={"anthropic-beta": "compact-2026-01-12"})
    raw = c.messages.with_raw_response.create(model="claude-sonnet-4-5", max_tokens=64,
                                              messages=HISTORY, extra_body=COMPACT)
    usage = json.loads(raw.http_response.content)["usage"]
    assert len(usage["iterations"]) == 2 and usage["input_tokens"] == 50
    row = proxy.rows()[-1]
    assert _row_usage(row) == _billed(usage) and row["completion_tokens"] == 309
    with c.messages.stream(model="claude-sonnet-4-5", max_tokens=64, messages=HISTORY,
                           extra_body=COMPACT) as stream:
        assert "".join(stream.text_stream).startswith("Mock reply")
        final = stream.get_final_message().usage.model_dump()
    row = proxy.rows()[-1]
    assert row["stream"] == 1 and _row_usage(row) == _billed(final)
