"""Gemini generateContent through the proxy: the real google-genai SDK against the loopback
mock (``proxy/demo/mock_gemini.py``), plus raw requests where the exact bytes matter."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from context_engine.proxy.dialects.jsonspan import object_spans

genai = pytest.importorskip("google.genai")
from google.genai import errors, types  # noqa: E402

MODEL = "gemini-2.5-flash"
LONG = json.dumps({"rows": [{"id": n, "name": f"item {n}", "note": None, "tags": ["a", "b"]}
                            for n in range(300)]})
SHELL = types.Tool(function_declarations=[types.FunctionDeclaration(
    name="run_shell_command", description="Runs a shell command.",
    parameters_json_schema={"type": "object", "properties": {"command": {"type": "string"}}})])


CLIENTS: list[Any] = []  # a client closes its connections when it is collected


def client(proxy: Any, key: str = "gm-test-key", version: str = "v1beta") -> Any:
    CLIENTS.append(genai.Client(api_key=key, http_options=types.HttpOptions(
        base_url=proxy.url, api_version=version)))
    return CLIENTS[-1]


def gemini_proxy(start_proxy: Any, mock: Any, **flags: Any) -> Any:
    """A proxy whose upstream is the mock's root (Gemini's paths carry their version)."""
    return start_proxy(upstream=mock.url, **flags)


def history(output: str = LONG) -> list[Any]:
    return [
        types.Content(role="user", parts=[types.Part(text="List the items.")]),
        types.Content(role="model", parts=[types.Part(function_call=types.FunctionCall(
            name="run_shell_command", args={"command": "cat items.json"}))]),
        types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(
            name="run_shell_command", response={"output": output}))]),
        types.Content(role="model", parts=[types.Part(text="There are 300 items.")]),
        types.Content(role="user", parts=[types.Part(text="Thanks. Which is first?")]),
    ]


@pytest.mark.parametrize("version", ["v1beta", "v1"])
def test_sdk_reply_usage_and_ledger(start_proxy, mock, version):
    proxy = gemini_proxy(start_proxy, mock)
    r = client(proxy, version=version).models.generate_content(
        model=MODEL, contents="Say hi.",
        config=types.GenerateContentConfig(system_instruction="You are terse."))
    assert r.text == "Mock reply to 2 messages."
    sent = mock.received[-1]
    assert sent.path == f"/{version}/models/{MODEL}:generateContent"
    assert sent.headers["x-goog-api-key"] == "gm-test-key"
    (row,) = proxy.rows()
    assert (row["api"], row["model"], row["status"], row["stream"]) == ("gemini", MODEL, 200, 0)
    assert row["prompt_tokens"] == r.usage_metadata.prompt_token_count > 0
    assert (row["completion_tokens"], row["finish_reason"]) == (9, "STOP")


def test_sdk_stream_is_relayed_and_its_usage_read(start_proxy, mock):
    proxy = gemini_proxy(start_proxy, mock)
    chunks = list(client(proxy).models.generate_content_stream(model=MODEL, contents="Say hi."))
    assert "".join(c.text or "" for c in chunks) == "Mock reply to 1 messages."
    assert mock.received[-1].query == "alt=sse"
    (row,) = proxy.rows()
    assert row["stream"] == 1 and row["prompt_tokens"] == chunks[-1].usage_metadata.prompt_token_count
    assert row["finish_reason"] == "STOP" and not row["error"]


def test_sdk_tool_output_is_rewritten_and_the_call_comes_back(start_proxy, mock):
    proxy = gemini_proxy(start_proxy, mock, enabled="tool_json",
                         rule_options={"tool_json": {"max_chars": 600}})
    r = client(proxy).models.generate_content(
        model=MODEL, contents=history(), config=types.GenerateContentConfig(tools=[SHELL]))
    assert r.function_calls and r.function_calls[0].name == "run_shell_command"
    body = mock.received[-1].json()
    output = body["contents"][2]["parts"][0]["functionResponse"]["response"]["output"]
    assert len(output) < len(LONG) / 4 and "orig:" in output
    (row,) = proxy.rows()
    assert row["tokens_sent"] < row["tokens_original"]
    assert json.loads(row["rule_savings"])["tool_json"] > 0


def _raw(proxy: Any, body: dict[str, Any], path: str = f"/v1beta/models/{MODEL}:generateContent",
         **kw: Any) -> httpx.Response:
    kw.setdefault("headers", {"x-goog-api-key": "gm-raw"})
    return httpx.post(proxy.url + path, content=json.dumps(body, indent=1).encode(), timeout=30, **kw)


def _body() -> dict[str, Any]:
    return {"contents": [
        {"role": "user", "parts": [{"text": "List the items."}]},
        {"role": "model", "parts": [{"functionCall": {"name": "run_shell_command",
                                                      "args": {"command": "cat items.json"}},
                                     "thoughtSignature": "CiQBVKhc7x0sig=="}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "run_shell_command",
                                                         "response": {"output": LONG}}}]},
        {"role": "user", "parts": [{"text": "Which is first?"}]}],
        "systemInstruction": {"parts": [{"text": "You are terse."}]},
        "tools": [{"functionDeclarations": [{"name": "run_shell_command", "parameters": {"type": "object"}}]}],
        "toolConfig": {"functionCallingConfig": {"mode": "AUTO"}},
        "generationConfig": {"temperature": 0, "thinkingConfig": {"includeThoughts": True}},
        "cachedContent": "cachedContents/abc123", "safetySettings": []}


def test_only_contents_change_every_other_byte_is_the_clients(start_proxy, mock):
    proxy = gemini_proxy(start_proxy, mock, enabled="tool_json",
                         rule_options={"tool_json": {"max_chars": 600}})
    sent = json.dumps(_body(), indent=1)
    assert _raw(proxy, _body()).status_code == 200
    got = mock.received[-1].body.decode()
    assert got != sent
    (_, before), (_, after) = object_spans(sent), object_spans(got)
    assert set(before) == set(after)
    for key in before:
        if key != "contents":
            assert got[slice(*after[key])] == sent[slice(*before[key])], key
    # the call and its signature unchanged; the untouched parts too
    assert json.loads(got)["contents"][1] == _body()["contents"][1]


def test_without_rules_the_request_goes_out_byte_for_byte(start_proxy, mock):
    proxy = gemini_proxy(start_proxy, mock)
    assert _raw(proxy, _body()).status_code == 200
    assert mock.received[-1].body == json.dumps(_body(), indent=1).encode()


def test_the_key_scopes_the_session_in_a_header_or_the_query(start_proxy, mock):
    proxy = gemini_proxy(start_proxy, mock)
    path = f"/v1beta/models/{MODEL}:generateContent"
    _raw(proxy, _body(), headers={"x-goog-api-key": "k-alice"})
    _raw(proxy, _body(), path=path + "?key=k-alice", headers={})
    _raw(proxy, _body(), path=path + "?key=k-bob", headers={})
    assert mock.received[-1].query == "key=k-bob"  # the key goes upstream where it came
    rows = proxy.rows()
    assert rows[0]["session"] == rows[1]["session"] != rows[2]["session"]


def test_errors_come_in_googles_shape(start_proxy, mock):
    proxy = gemini_proxy(start_proxy, mock)
    bad = httpx.post(proxy.url + f"/v1beta/models/{MODEL}:generateContent", content=b"{not json",
                     headers={"x-goog-api-key": "k"})
    assert bad.status_code == 400
    error = bad.json()["error"]
    assert error["code"] == 400 and error["status"] == "INVALID_ARGUMENT" and error["message"]
    assert httpx.get(proxy.url + "/v1beta/nothing/here:x").status_code == 404
    down = start_proxy(upstream="http://127.0.0.1:9")
    with pytest.raises(errors.ServerError) as raised:
        client(down).models.generate_content(model=MODEL, contents="hi")
    assert raised.value.code == 502 and raised.value.status == "UNAVAILABLE"


def test_a_stream_without_alt_sse_is_one_json_array(start_proxy, mock):
    proxy = gemini_proxy(start_proxy, mock)
    r = _raw(proxy, {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
             path=f"/v1beta/models/{MODEL}:streamGenerateContent")
    assert r.status_code == 200 and isinstance(r.json(), list)
    (row,) = proxy.rows()
    assert row["stream"] == 1 and row["prompt_tokens"] and row["finish_reason"] == "STOP"
