"""Bad input never answers 500: it is forwarded byte-identical or answered with a 4xx.

Lone UTF-16 surrogates (``"\\ud800"``, a JS-truncated emoji), non-string text parts,
malformed ``tool_calls`` and odd header bytes go through the real server with the
default rules on, in front of a raw loopback upstream that records what it got and
always answers 200 (so any 5xx seen is the proxy's own); the ledger keeps writing.
"""

from __future__ import annotations

import json
import os

import httpx
import pytest

from context_engine.proxy.demo.mock_upstream import ServerThread
from context_engine.proxy.edge.app import create_app
from context_engine.proxy.engine.engine import Engine
from context_engine.proxy.settings import load_settings
from context_engine.proxy.store.stores import MemoryStore
from tests.conftest import RunningProxy

SURROGATE = "\\ud800"


@pytest.fixture
def default_proxy(raw, tmp_path):
    """A proxy with the default rules (config.yaml's list) in front of the raw upstream."""
    settings = load_settings(flags={"store": "memory://", "ledger": str(tmp_path / "l.db"),
                                    "upstream": raw.url + "/v1"}, env={}, config_path=os.devnull)
    app = create_app(settings, engine=Engine(settings, store=MemoryStore()))
    with ServerThread(app) as server:
        yield RunningProxy(server, app, settings.ledger)


def _post(proxy, body: bytes, **headers) -> httpx.Response:
    return httpx.post(proxy.url + "/v1/chat/completions", content=body,
                      headers={"content-type": "application/json", **headers}, timeout=30)


def _forwarded_or_4xx(proxy, raw, body: bytes, **headers) -> httpx.Response:
    before = len(raw.received)
    r = _post(proxy, body, **headers)
    assert r.status_code < 500, (r.status_code, r.text)
    if r.status_code < 400:
        assert raw.received[-1].body == body, "a body the rules cannot handle goes out as sent"
    else:
        assert r.status_code < 500 and set(r.json()["error"]) == {"message", "type", "param", "code"}
        assert len(raw.received) == before
    return r


def _conversation(**overrides) -> dict:
    body = {"model": "gpt-4o", "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "And 3+3?"}]}
    body.update(overrides)
    return body


def _with_surrogate(body: dict) -> bytes:
    """JSON text with every "@S@" replaced by the escape of a lone surrogate."""
    return json.dumps(body).replace("@S@", SURROGATE).encode()


def test_surrogate_in_a_user_message_is_forwarded_and_recorded(default_proxy, raw):
    body = _conversation()
    body["messages"][1]["content"] = "What is 2+2? @S@"
    body["messages"][-1]["content"] = "And 3+3? \ud83d@S@"
    body_bytes = _with_surrogate(body)
    r = _forwarded_or_4xx(default_proxy, raw, body_bytes)
    assert r.status_code == 200 and raw.received[-1].body == body_bytes
    rows = default_proxy.rows()
    assert len(rows) == 1 and rows[0]["status"] == 200


def test_surrogate_in_model_keeps_the_ledger_writing(default_proxy, raw):
    body_bytes = _with_surrogate(_conversation(model="gpt-4o@S@"))
    _forwarded_or_4xx(default_proxy, raw, body_bytes)
    ok = _post(default_proxy, json.dumps(_conversation()).encode())
    assert ok.status_code == 200
    rows = default_proxy.rows()
    assert len(rows) == 2 and rows[1]["model"] == "gpt-4o"
    assert "\ufffd" in rows[0]["model"] or rows[0]["status"] == 400
    assert httpx.get(default_proxy.url + "/metrics").status_code == 200
    assert httpx.get(default_proxy.url + "/stats", timeout=5).status_code == 200


@pytest.mark.parametrize("where", [
    "system", "tool_arguments", "tool_result", "key", "session_header_value", "part_text",
    "name", "extra_field"])
def test_surrogates_anywhere_never_500(default_proxy, raw, where):
    body = _conversation(tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}])
    msgs = body["messages"]
    if where == "system":
        msgs[0]["content"] = "@S@ terse"
    elif where == "tool_arguments":
        msgs[2] = {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"q": "@S@"}'}}]}
        msgs.insert(3, {"role": "tool", "tool_call_id": "c1", "content": "4"})
    elif where == "tool_result":
        msgs[2] = {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
        msgs.insert(3, {"role": "tool", "tool_call_id": "c1", "content": '{"a": "@S@"}'})
    elif where == "key":
        msgs[1]["x@S@"] = 1
    elif where == "part_text":
        msgs[1]["content"] = [{"type": "text", "text": "hi @S@"}]
    elif where == "name":
        msgs[1]["name"] = "@S@"
    elif where == "extra_field":
        body["metadata"] = {"@S@": "@S@"}
    headers = {}
    if where == "session_header_value":
        headers = {"x-session-id": b"s\xed\xa0\x80", "authorization": b"Bearer \xff\xfe"}
    _forwarded_or_4xx(default_proxy, raw, _with_surrogate(body), **headers)
    assert len(default_proxy.rows()) == 1


@pytest.mark.parametrize("message", [
    {"role": "user", "content": [{"type": "text", "text": 5}]},
    {"role": "user", "content": [{"type": "text", "text": None}, "plain", 7, None, []]},
    {"role": "user", "content": [{"type": "text", "text": {"nested": ["x"]}}]},
    {"role": "assistant", "content": "x", "tool_calls": "not a list"},
    {"role": "assistant", "content": None, "tool_calls": [5, None, "x"]},
    {"role": "assistant", "content": None, "tool_calls": [{"function": 5}]},
    {"role": "assistant", "content": None, "tool_calls": [{"id": 7, "function": {"arguments": {}}}]},
    {"role": "tool", "tool_call_id": ["x"], "content": [1, 2]},
    {"role": 5, "content": "x"},
    {"role": "user", "content": "x", "name": {"a": 1}},
])
def test_odd_messages_are_forwarded_or_answered_4xx(default_proxy, raw, message):
    body = _conversation()
    body["messages"].insert(1, message)
    body["messages"].insert(3, message)
    _forwarded_or_4xx(default_proxy, raw, json.dumps(body).encode())


def test_deep_nesting_is_forwarded_or_answered_4xx(default_proxy, raw):
    for depth in (200, 5000, 100_000):
        body_bytes = json.dumps(_conversation()).encode()
        body_bytes = body_bytes[:-1] + b', "x": ' + b"[" * depth + b"]" * depth + b"}"
        _forwarded_or_4xx(default_proxy, raw, body_bytes)
        tools = b', "tools": [{"type": "function", "function": {"name": "f", "parameters": ' + \
            b'{"a":' * depth + b"1" + b"}" * depth + b"}}]}"
        _forwarded_or_4xx(default_proxy, raw, json.dumps(_conversation()).encode()[:-1] + tools)
