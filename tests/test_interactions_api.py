"""Gemini's Interactions API through the proxy: the real google-genai SDK (its
``interactions`` client) against the loopback mock (``proxy/demo/mock_interactions.py``),
plus raw requests where the exact bytes matter."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from context_engine.proxy.dialects.interactions.recall import TOOL as RECALL_TOOL
from context_engine.proxy.dialects.interactions.request import parse
from context_engine.proxy.dialects.jsonspan import object_spans

genai = pytest.importorskip("google.genai")
errors = pytest.importorskip("google.genai._interactions_errors")

MODEL = "gemini-3-flash-preview"
LONG = json.dumps({"rows": [{"id": n, "name": f"item {n}", "note": None, "tags": ["a", "b"]}
                            for n in range(300)]})
SHELL = {"type": "function", "name": "run_shell_command", "description": "Runs a shell command.",
         "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}
CLIENTS: list[Any] = []  # a client closes its connections when it is collected


def client(proxy: Any, version: str = "v1beta", key: str = "gm-test-key") -> Any:
    CLIENTS.append(genai.Client(api_key=key, http_options={"base_url": proxy.url, "api_version": version}))
    return CLIENTS[-1]


def steps(output: str = LONG) -> list[dict[str, Any]]:
    return [
        {"type": "user_input", "content": [{"type": "text", "text": "List the items."},
                                           {"type": "image", "uri": "gs://bucket/shot.png",
                                            "mime_type": "image/png"}]},
        {"type": "thought", "signature": "CiQBVKhc7x0sig=="},
        {"type": "function_call", "id": "call_1", "name": "run_shell_command",
         "arguments": {"command": "cat items.json"}},
        {"type": "function_result", "call_id": "call_1", "name": "run_shell_command", "result": output},
        {"type": "model_output", "content": [{"type": "text", "text": "There are 300 items."}]},
        {"type": "user_input", "content": [{"type": "text", "text": "Thanks. Which is first?"}]},
    ]


def body(**extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "system_instruction": "You are terse.", "input": steps(), "tools": [SHELL],
            "generation_config": {"temperature": 0, "thinking_level": "low"}, "store": True, **extra}


def post(proxy: Any, data: Any, path: str = "/v1beta/interactions", **kw: Any) -> httpx.Response:
    kw.setdefault("headers", {"x-goog-api-key": "gm-raw"})
    raw = data if isinstance(data, bytes) else json.dumps(data, indent=1).encode()
    return httpx.post(proxy.url + path, content=raw, timeout=30, **kw)


@pytest.mark.parametrize("version", ["v1beta", "v1"])
def test_sdk_reply_usage_and_ledger(start_proxy, mock, version):
    proxy = start_proxy(upstream=mock.url)
    r = client(proxy, version).interactions.create(model=MODEL, input="Say hi.",
                                                   system_instruction="You are terse.")
    assert r.output_text == "Mock reply to 2 messages." and r.status == "completed"
    sent = mock.received[-1]
    assert sent.path == f"/{version}/interactions" and sent.headers["x-goog-api-key"] == "gm-test-key"
    (row,) = proxy.rows()
    assert (row["api"], row["model"], row["status"], row["stream"]) == ("interactions", MODEL, 200, 0)
    assert row["prompt_tokens"] == r.usage.total_input_tokens > 0
    assert (row["completion_tokens"], row["finish_reason"]) == (9, "completed")


def test_cached_tokens_reach_the_ledger(start_proxy, mock):
    proxy = start_proxy(upstream=mock.url)
    big = body(input=steps("x " * 3000))
    post(proxy, big)
    r = post(proxy, big)
    assert r.json()["usage"]["total_cached_tokens"] > 1000
    assert proxy.rows()[-1]["cached_tokens"] == r.json()["usage"]["total_cached_tokens"]


def test_sdk_stream_is_relayed_and_its_usage_read(start_proxy, mock):
    proxy = start_proxy(upstream=mock.url)
    events = list(client(proxy).interactions.create(model=MODEL, input="Say hi.", stream=True))
    text = "".join(e.delta.text for e in events if e.event_type == "step.delta")
    assert text == "Mock reply to 1 messages." and events[-1].event_type == "interaction.completed"
    (row,) = proxy.rows()
    assert row["stream"] == 1 and row["prompt_tokens"] == events[-1].interaction.usage.total_input_tokens
    assert row["finish_reason"] == "completed" and not row["error"]


def test_reply_bytes_are_the_upstreams(start_proxy, mock):
    proxy = start_proxy(upstream=mock.url, enabled="tool_json", rule_options={"tool_json": {"max_chars": 600}})
    for data in (body(), body(stream=True)):
        via = post(proxy, data).content
        direct = httpx.post(mock.url + "/v1beta/interactions", content=mock.received[-1].body,
                            headers={"x-goog-api-key": "gm-raw"}, timeout=30).content
        assert via == direct


def test_sdk_tool_output_is_rewritten_and_the_call_comes_back(start_proxy, mock):
    proxy = start_proxy(upstream=mock.url, enabled="tool_json", rule_options={"tool_json": {"max_chars": 600}})
    r = client(proxy).interactions.create(model=MODEL, input=steps(), tools=[SHELL])
    assert r.status == "requires_action" and r.steps[0].name == "run_shell_command"
    output = mock.received[-1].json()["input"][3]["result"]
    assert len(output) < len(LONG) / 4 and "orig:" in output
    (row,) = proxy.rows()
    assert row["tokens_sent"] < row["tokens_original"]
    assert json.loads(row["rule_savings"])["tool_json"] > 0


def test_only_input_changes_every_other_byte_is_the_clients(start_proxy, mock):
    proxy = start_proxy(upstream=mock.url, enabled="tool_json", rule_options={"tool_json": {"max_chars": 600}})
    sent = json.dumps(body(), indent=1)
    assert post(proxy, body()).status_code == 200
    got = mock.received[-1].body.decode()
    assert got != sent
    (_, before), (_, after) = object_spans(sent), object_spans(got)
    assert set(before) == set(after)
    for key in before:
        if key == "tools":  # the lossy rewrite offers context_recall after the client's tools
            assert json.loads(got)["tools"] == body()["tools"] + [RECALL_TOOL]
            assert got[slice(*after[key])].startswith(sent[slice(*before[key])][:-1])
        elif key != "input":
            assert got[slice(*after[key])] == sent[slice(*before[key])], key
    out = json.loads(got)["input"]
    for n in (0, 1, 2, 4, 5):  # the image, the thought's signature, the call: unchanged
        assert out[n] == steps()[n]
        assert json.dumps(out[n], indent=1).replace("\n", "\n  ") in got  # in its own bytes


def test_without_rules_the_request_goes_out_byte_for_byte(start_proxy, mock):
    proxy = start_proxy(upstream=mock.url)
    for data in (body(), body(input="just text"), body(input={"type": "text", "text": "one content"}),
                 {"model": MODEL, "continuation_token": "tok_1"}):
        assert post(proxy, data).status_code == 200
        assert mock.received[-1].body == json.dumps(data, indent=1).encode()


def test_a_previous_interaction_id_is_recorded_as_server_held_state(start_proxy, mock):
    proxy = start_proxy(upstream=mock.url)
    r = client(proxy).interactions.create(
        model=MODEL, previous_interaction_id="v1_prev", system_instruction="You are terse.",
        input=[{"type": "function_result", "call_id": "call_9", "name": "run_shell_command",
                "result": "ok"}])
    assert r.previous_interaction_id == "v1_prev"
    assert mock.received[-1].json()["previous_interaction_id"] == "v1_prev"
    (row,) = proxy.rows()
    assert json.loads(row["context"])["server_state"] == "previous_interaction_id"
    parsed = parse(mock.received[-1].body)  # the server holds the instruction with the history
    assert [m["role"] for m in parsed.chat["messages"]] == ["tool"]


def test_the_neutral_form_and_an_unchanged_round_trip():
    raw = json.dumps(body(), indent=1).encode()
    parsed = parse(raw)
    msgs = parsed.chat["messages"]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert msgs[2]["tool_calls"][0]["id"] == "call_1" and msgs[3]["tool_call_id"] == "call_1"
    assert parsed.splice(msgs) == raw
    assert parsed.chat["tools"][0]["function"]["name"] == "run_shell_command"


def test_bad_input_gets_a_4xx_in_googles_shape(start_proxy, mock):
    proxy = start_proxy(upstream=mock.url)
    for bad in (b"{not json", json.dumps({"model": MODEL, "input": 7}).encode(),
                json.dumps({"model": MODEL, "input": [1, 2]}).encode(),
                json.dumps({"model": MODEL, "input": [{"type": "user_input", "content": "x"}]}).encode()):
        r = post(proxy, bad)
        assert r.status_code == 400, bad
        error = r.json()["error"]
        assert error["code"] == 400 and error["status"] == "INVALID_ARGUMENT" and error["message"]


def test_upstream_faults_reach_the_client_as_faults(start_proxy, mock):
    proxy = start_proxy(upstream=mock.url)
    with pytest.raises(errors.InternalServerError) as raised:  # the upstream's 500, as sent
        client(proxy).interactions.create(model="mock-500", input="hi")
    assert raised.value.status_code == 500
    with pytest.raises(errors.APIError):  # a stream cut off mid-way: never a clean end
        list(client(proxy).interactions.create(model="mock-cut", input="one two three", stream=True))
    down = start_proxy(upstream="http://127.0.0.1:9")
    with pytest.raises(errors.APIStatusError) as unreachable:
        client(down).interactions.create(model=MODEL, input="hi")
    assert unreachable.value.status_code == 502
    assert unreachable.value.body["error"]["status"] == "UNAVAILABLE"
    rows = proxy.rows()
    assert rows[0]["status"] == 500 and rows[1]["error"]
