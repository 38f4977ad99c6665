"""The Responses API through the proxy, driven by the real openai SDK against the loopback
mock (which answers with the real JSON bodies and event streams)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import openai
import pytest

from tests.fakes.rules import DropFirstAssistant, DropOldAssistant

TOOLS = [{"type": "function", "name": "lookup", "description": "Look up a fact.",
          "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}]
ENC = "gAAAAABsecret+/reasoning=="
HISTORY: list[Any] = [
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "4"},
    {"role": "user", "content": "Look up the capital of France."},
    {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": ENC},
    {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": '{"query":"capital of France"}'},
    {"type": "function_call_output", "call_id": "call_1", "output": '{"capital": "Paris", "note": null}'},
    {"role": "user", "content": "And of Spain?"},
]


def _tool_loop(create, first_input):
    """Call, run each function call, send the outputs back, until the model answers."""
    items = list(first_input)
    for _ in range(4):
        resp = create(items)
        calls = [o for o in resp.output if o.type == "function_call"]
        if not calls:
            return resp, items
        items += [o.model_dump(exclude_none=True) for o in resp.output]
        items += [{"type": "function_call_output", "call_id": c.call_id,
                   "output": json.dumps({"answer": 42, "for": json.loads(c.arguments)})} for c in calls]
        items.append({"role": "user", "content": "thanks, go on"}) if len(items) < 8 else None
    raise AssertionError("the tool loop did not end")


def test_create_tool_loop_with_reasoning_items(start_proxy, mock):
    proxy = start_proxy()
    client = proxy.client()

    def create(items):
        return client.responses.create(model="gpt-5", input=items, tools=TOOLS, store=False,
                                       include=["reasoning.encrypted_content"])
    resp, items = _tool_loop(create, [{"role": "user", "content": "Find the answer."}])
    assert resp.output_text.startswith("Mock reply to")
    assert resp.model_extra["x_mock_extra"] == {"kept": True}
    sent = [r for r in mock.received if r.path == "/v1/responses"][-1].json()
    reasoning = [i for i in sent["input"] if i.get("type") == "reasoning"]
    assert reasoning and all(i["encrypted_content"].startswith("gAAAAAB") for i in reasoning)
    rows = proxy.rows()
    assert [r["api"] for r in rows[-3:]] == ["responses"] * 3
    assert rows[-1]["prompt_tokens"] == resp.usage.input_tokens
    assert rows[-1]["completion_tokens"] == 9 and rows[-1]["finish_reason"] == "completed"
    assert rows[-1]["tokens_original"] > 10


def test_passthrough_bytes_both_ways(start_proxy, mock):
    proxy = start_proxy()
    body = (b'{"model":"gpt-4o", "input":[{"role":"user","content":"caf\\u00e9"}, '
            b'{"type":"reasoning","summary":[],"encrypted_content":"x\\/y"}],  "store": false, "zz":1.0e0}')
    via = httpx.post(proxy.url + "/v1/responses", content=body, headers={"x-custom": "kept"})
    assert mock.received[-1].body == body and mock.received[-1].headers["x-custom"] == "kept"
    direct = httpx.post(mock.url + "/v1/responses", content=body)
    assert via.content == direct.content
    assert int(via.headers["x-context-engine-tokens-before"]) > 0


@pytest.mark.parametrize("path", ["/v1/responses", "/responses"])
def test_stream_events_relay_as_sent_and_usage_is_read(start_proxy, mock, path):
    proxy = start_proxy()
    body = {"model": "gpt-4o", "input": HISTORY, "tools": TOOLS, "stream": True}
    direct = httpx.post(mock.url + "/v1/responses", json=body).content
    via = httpx.post(proxy.url + path, json=body).content
    assert via == direct and via.rstrip().splitlines()[-2] == b"event: response.completed"
    row = proxy.rows()[-1]
    usage = json.loads(via.rstrip().splitlines()[-1][6:])["response"]["usage"]
    assert row["stream"] == 1 and row["prompt_tokens"] == usage["input_tokens"] > 0
    assert row["cached_tokens"] == usage["input_tokens_details"]["cached_tokens"]


def test_sdk_stream_and_stream_helper(start_proxy):
    proxy = start_proxy()
    client = proxy.client()
    events = list(client.responses.create(model="gpt-4o", input="Say hi", stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == \
        "Mock reply to 1 messages."
    with client.responses.stream(model="gpt-4o", input=HISTORY, tools=TOOLS) as stream:
        final = stream.get_final_response()
    call = [o for o in final.output if o.type == "function_call"][0]
    assert call.name == "lookup" and json.loads(call.arguments) == {"query": "And of Spain?"}


def test_async_client(start_proxy):
    proxy = start_proxy()

    async def run():
        client = openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key="sk-a", max_retries=0)
        try:
            first = await client.responses.create(model="gpt-4o", input=HISTORY[:3])
            stream = await client.responses.create(model="gpt-4o", input=HISTORY[:3], stream=True)
            kinds = [e.type async for e in stream]
            return first, kinds
        finally:
            await client.close()
    first, kinds = asyncio.run(run())
    assert first.output_text == "Mock reply to 3 messages." and kinds[-1] == "response.completed"


def test_rewrite_keeps_reasoning_items_byte_identical(start_proxy, mock):
    proxy = start_proxy(rules=[DropOldAssistant()])
    body = json.dumps({"model": "gpt-5", "instructions": "Be terse.", "input": HISTORY,
                       "tools": TOOLS, "store": False}, indent=1).encode()
    r = httpx.post(proxy.url + "/v1/responses", content=body)
    assert r.status_code == 200
    got = mock.received[-1].body
    assert got != body and json.loads(got)["input"] == [{**i, "content": "…"} if i.get("content") == "4" else i for i in HISTORY]
    for item in HISTORY[3:6]:  # the reasoning item and its call: their exact original text
        raw = json.dumps(item, indent=1).replace("\n", "\n  ").encode()
        assert raw in body and raw in got
    head, tail = body.split(b'"input":')[0], body.split(b'"tools":')[1]
    assert got.startswith(head) and got.endswith(tail)
    assert proxy.rows()[-1]["tokens_sent"] <= proxy.rows()[-1]["tokens_original"]


def test_a_rule_that_drops_an_opaque_item_fails_open(start_proxy, mock):
    proxy = start_proxy(rules=[DropFirstAssistant()])
    body = json.dumps({"model": "gpt-5", "input": HISTORY}).encode()
    httpx.post(proxy.url + "/v1/responses", content=body)
    assert mock.received[-1].body == body
    assert proxy.rows()[-1]["failed_open"] == 1


def test_previous_response_id_only_input_is_rewritten(start_proxy, mock):
    proxy = start_proxy(rules=[DropOldAssistant()])
    body = json.dumps({"model": "gpt-4o", "previous_response_id": "resp_1", "instructions": "Hi.",
                       "input": HISTORY[:3]}).encode()
    httpx.post(proxy.url + "/v1/responses", content=body)
    sent = mock.received[-1].json()
    assert sent["previous_response_id"] == "resp_1" and sent["instructions"] == "Hi."
    assert [i["content"] for i in sent["input"]] == ["What is 2+2?", "…", "Look up the capital of France."]
    assert json.loads(proxy.rows()[-1]["context"])["server_state"] == "previous_response_id"


@pytest.mark.parametrize("body,param", [
    (b"{not json", None),
    (b'{"model": 5, "input": "x"}', "model"),
    (b'{"model": "gpt-4o", "input": 7}', "input"),
    (b'{"model": "gpt-4o", "input": ["x"]}', "input[0]"),
    (b'{"model": "gpt-4o", "input": [{"role": "robot", "content": "x"}]}', "input[0]"),
    (b'{"model": "gpt-4o", "input": [{"type": "function_call_output", "output": "x"}]}', "input[0].call_id"),
])
def test_bad_requests_answer_400_in_openai_shape(start_proxy, mock, body, param):
    proxy = start_proxy()
    before = len(mock.received)
    r = httpx.post(proxy.url + "/v1/responses", content=body)
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    assert r.json()["error"]["param"] == param and len(mock.received) == before


def test_unknown_items_pass_through_and_other_routes_are_untouched(start_proxy, mock):
    proxy = start_proxy(rules=[DropOldAssistant()])
    odd = {"type": "some_future_item", "data": [1, 2.50, None]}
    body = json.dumps({"model": "gpt-4o", "input": HISTORY[:2] + [odd] + HISTORY[2:3]}).encode()
    assert httpx.post(proxy.url + "/v1/responses", content=body).status_code == 200
    assert json.dumps(odd).encode() in mock.received[-1].body
    for method, path in [("POST", "/v1/responses/compact"), ("GET", "/v1/responses/resp_1"),
                         ("GET", "/v1/responses/resp_1/input_items?limit=2"),
                         ("POST", "/v1/responses/resp_1/cancel"), ("DELETE", "/v1/responses/resp_1")]:
        payload = b'{"model":"gpt-4o", "input": []}' if method == "POST" else None
        r = httpx.request(method, proxy.url + path, content=payload)
        assert r.json()["echo"]["path"] == path.split("?")[0]
        assert mock.received[-1].body == (payload or b"")
