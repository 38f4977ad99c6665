"""The proxy in front of a real loopback upstream, driven by the real openai SDK."""

from __future__ import annotations

import json

import httpx

from tests.fakes.rules import DropOldAssistant

HISTORY = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "4"},
    {"role": "user", "content": "And 3+3?"},
]
TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "Look up a fact.",
                                           "parameters": {"type": "object", "properties": {
                                               "q": {"type": "string"}}}}}]


def test_non_stream_reply_reaches_the_sdk_with_unknown_fields(start_proxy, mock):
    proxy = start_proxy()
    raw = proxy.client().chat.completions.with_raw_response.create(
        model="gpt-4o", messages=HISTORY, user="u-42", metadata={"k": "v"},
        extra_body={"x_vendor_flag": {"nested": [1, 2.5, None]}})
    completion = raw.parse()
    assert completion.choices[0].message.content == "Mock reply to 4 messages."
    assert completion.model_extra["x_mock_extra"] == {"kept": True}
    assert raw.headers["x-request-id"] == "req_mock"
    assert int(raw.headers["x-context-engine-tokens-before"]) > 20
    sent = mock.received[-1].json()
    assert sent["user"] == "u-42" and sent["metadata"] == {"k": "v"}
    assert sent["x_vendor_flag"] == {"nested": [1, 2.5, None]}
    assert mock.received[-1].headers["authorization"] == "Bearer sk-test-key"


def test_passthrough_forwards_the_exact_client_bytes(start_proxy, mock):
    proxy = start_proxy()
    body = b'{"model":"gpt-4o",  "messages":[{"role":"user","content":"caf\\u00e9"}], "n": 1.0e0, "zz": {}}'
    r = httpx.post(proxy.url + "/v1/chat/completions", content=body,
                   headers={"content-type": "application/json", "x-custom": "kept"})
    assert r.status_code == 200
    assert mock.received[-1].body == body
    assert mock.received[-1].headers["x-custom"] == "kept"


def test_response_bytes_are_relayed_unchanged(start_proxy, mock):
    proxy = start_proxy()
    body = {"model": "gpt-4o", "messages": HISTORY}
    direct = httpx.post(mock.url + "/v1/chat/completions", json=body)
    via = httpx.post(proxy.url + "/v1/chat/completions", json=body)
    assert via.content == direct.content
    assert via.headers["content-type"] == direct.headers["content-type"]


def test_rewrite_replaces_only_messages(start_proxy, mock):
    proxy = start_proxy(rules=[DropOldAssistant()])
    body = b'{"model": "gpt-4o", "temperature": 0.70, "messages": ' + json.dumps(HISTORY).encode() + b', "seed": 7}'
    r = httpx.post(proxy.url + "/chat/completions", content=body,
                   headers={"content-type": "application/json"})
    assert r.status_code == 200
    got = mock.received[-1].body
    assert got.startswith(b'{"model": "gpt-4o", "temperature": 0.70, "messages": [')
    assert got.endswith(b'], "seed": 7}')
    assert [m["content"] for m in json.loads(got)["messages"]] == ["You are terse.", "What is 2+2?", "…", "And 3+3?"]
    assert int(r.headers["x-context-engine-tokens-after"]) <= int(r.headers["x-context-engine-tokens-before"])


def test_stream_text_relays_every_event_and_records_usage(start_proxy, mock):
    proxy = start_proxy()
    stream = proxy.client().chat.completions.create(
        model="gpt-4o", messages=HISTORY, stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.strip() == "Mock reply to 4 messages."
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 9
    row = proxy.rows()[-1]
    assert row["stream"] == 1 and row["completion_tokens"] == 9
    assert row["prompt_tokens"] == chunks[-1].usage.prompt_tokens
    assert row["finish_reason"] == "stop"


def test_stream_tool_call_deltas_reassemble(start_proxy):
    proxy = start_proxy()
    stream = proxy.client().chat.completions.create(
        model="gpt-4o", messages=HISTORY, tools=TOOLS, stream=True)
    name, args, finish = "", "", None
    for chunk in stream:
        for call in chunk.choices[0].delta.tool_calls or ():
            name += call.function.name or ""
            args += call.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert name == "lookup" and json.loads(args) == {"query": "And 3+3?"} and finish == "tool_calls"


def test_stream_bytes_equal_the_upstream_bytes(start_proxy, mock):
    proxy = start_proxy()
    body = {"model": "gpt-4o", "messages": HISTORY, "stream": True, "tools": TOOLS}
    direct = httpx.post(mock.url + "/v1/chat/completions", json=body).content
    via = httpx.post(proxy.url + "/v1/chat/completions", json=body).content
    assert via == direct and via.endswith(b"data: [DONE]\n\n")


def test_non_stream_tool_call_round_trip(start_proxy):
    proxy = start_proxy()
    completion = proxy.client().chat.completions.create(model="gpt-4o", messages=HISTORY, tools=TOOLS)
    call = completion.choices[0].message.tool_calls[0]
    follow = HISTORY + [completion.choices[0].message.model_dump(exclude_none=True),
                        {"role": "tool", "tool_call_id": call.id, "content": "6"}]
    second = proxy.client().chat.completions.create(model="gpt-4o", messages=follow, tools=TOOLS)
    assert second.choices[0].message.content == "Mock reply to 6 messages."


def test_other_endpoints_pass_through(start_proxy, mock):
    proxy = start_proxy()
    models = proxy.client().models.list()
    assert [m.id for m in models.data] == ["gpt-4o"]
    r = httpx.post(proxy.url + "/v1/embeddings?x=1", json={"input": "hi", "model": "e"})
    assert r.json()["echo"] == {"method": "POST", "path": "/v1/embeddings", "query": "x=1",
                                "body": '{"input":"hi","model":"e"}'}
    assert r.headers["x-mock"] == "other"
    d = httpx.delete(proxy.url + "/v1/files/file-1")
    assert d.json()["echo"]["method"] == "DELETE" and mock.received[-1].path == "/v1/files/file-1"


def test_healthz(start_proxy):
    proxy = start_proxy()
    r = httpx.get(proxy.url + "/healthz")
    assert r.status_code == 200 and r.json()["status"] == "ok"
