"""Generated Responses and Anthropic Messages bodies through the real server with the
default rules: each answers 200 or a 4xx in its API's own error shape, never a 5xx.
Bodies are agent conversations (repeated and JSON tool outputs, so the rules rewrite
them) with odd items mixed in: reasoning/thinking with signatures, unknown item and
block types, unknown roles, malformed items. Whatever the rules did, every opaque or
unknown item reaches the upstream byte for byte and in order, and every field outside
the conversation is unchanged."""

from __future__ import annotations

import hashlib
import json
import os

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from context_engine.proxy.demo.mock_upstream import ServerThread
from context_engine.proxy.dialects.recall_wire import tool_name
from context_engine.proxy.edge.app import create_app
from context_engine.proxy.engine.engine import Engine
from context_engine.proxy.settings import load_settings
from context_engine.proxy.store.stores import MemoryStore
from tests.conftest import RunningProxy
from tests.fakes import raw_upstream

TOOL_OUTPUT = json.dumps({"rows": [{"id": n, "name": f"item {n}", "tags": ["a", "b"], "note": None}
                                   for n in range(30)]}, indent=2)
CONVERSATION = {"responses": "input", "anthropic": "messages"}
PATH = {"responses": "/v1/responses", "anthropic": "/v1/messages"}

ODD_RESPONSES = [
    {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA+/x=="},
    {"type": "compaction", "id": "cmp_1", "encrypted_content": "c2Vj"},
    {"type": "item_reference", "id": "msg_9"},
    {"type": "web_search_call", "id": "ws_1", "status": "completed"},
    {"type": "future_kind", "payload": [1, 2.50, None, {"x": "ü"}]},
]
BAD_RESPONSES = [{"role": "user"}, {"type": "function_call_output", "output": "x"}, 7, "text",
                 {"no_type": True}, {"type": "message", "role": "robot", "content": "x"},
                 {"type": "message", "role": "user", "content": [5, {"type": "input_text"}]},
                 {"type": "function_call", "call_id": "c9", "name": 5, "arguments": {"not": "a string"}}]
ODD_BLOCKS = [
    {"type": "thinking", "thinking": "hmm", "signature": "EqQB+/=="},
    {"type": "redacted_thinking", "data": "EmwKAh=="},
    {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"q": "x"}},
    {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
    {"type": "future_block", "payload": [1, 2.50, None]},
]
BAD_BLOCKS = [{"text": "no type"}, 5, {"type": "tool_use", "id": 3, "name": "x", "input": {}},
              {"type": "text", "text": 5}, {"type": "tool_result", "tool_use_id": "toolu_x", "content": 7},
              {"type": "image", "source": None}]


def responses_body(turns: list[tuple[int, int | None]]) -> dict:
    items: list = [{"type": "message", "role": "user", "content": "Find the item tagged b."}]
    for n, (odd, bad) in enumerate(turns):
        if odd >= 0:
            items.append(ODD_RESPONSES[odd % len(ODD_RESPONSES)])
        items.append({"type": "function_call", "call_id": f"call_{n}", "name": "lookup",
                      "arguments": json.dumps({"page": n % 2})})
        items.append({"type": "function_call_output", "call_id": f"call_{n}", "output": TOOL_OUTPUT})
        items.append({"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"next {n}"}]})
        if bad is not None:
            items.append(BAD_RESPONSES[bad % len(BAD_RESPONSES)])
    return {"model": "gpt-4o", "instructions": "Be brief.", "input": items, "store": False,
            "tools": [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]}


def anthropic_body(turns: list[tuple[int, int | None]]) -> dict:
    msgs: list = [{"role": "user", "content": "Find the item tagged b."}]
    for n, (odd, bad) in enumerate(turns):
        blocks = [ODD_BLOCKS[odd % len(ODD_BLOCKS)]] if odd >= 0 else []
        blocks.append({"type": "tool_use", "id": f"toolu_{n}", "name": "lookup", "input": {"page": n % 2}})
        msgs.append({"role": "assistant", "content": blocks})
        user = [{"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": TOOL_OUTPUT},
                {"type": "text", "text": f"next {n}", "cache_control": {"type": "ephemeral"}}]
        if bad is not None:
            user.append(BAD_BLOCKS[bad % len(BAD_BLOCKS)])
        msgs.append({"role": "user", "content": user})
    if len(turns) % 3 == 2:
        msgs.insert(1, {"role": "narrator", "content": [{"type": "text", "text": "an unknown role"}]})
    return {"model": "claude-sonnet-4-5", "max_tokens": 256, "system": "Be brief.", "messages": msgs,
            "metadata": {"user_id": "u1"}}


def opaque_texts(api: str, body: dict) -> list[str]:
    """The exact text of each opaque item, in order."""
    if api == "responses":
        return [json.dumps(i) for i in body["input"] if i in ODD_RESPONSES]
    return [json.dumps(m) if m["role"] == "narrator" else json.dumps(b)
            for m in body["messages"] for b in m["content"][:1 if m["role"] == "narrator" else None]
            if m["role"] == "narrator" or b in ODD_BLOCKS]


def in_order(text: str, parts: list[str]) -> bool:
    at = 0
    for part in parts:
        at = text.find(part, at)
        if at < 0:
            return False
        at += len(part)
    return True


@pytest.fixture(scope="module")
def server():
    upstream = raw_upstream.start()
    settings = load_settings(flags={"store": "memory://", "ledger": ":memory:",
                                    "upstream": upstream.url + "/v1", "rules_deadline_ms": 0},
                             env={}, config_path=os.devnull)
    app = create_app(settings, engine=Engine(settings, store=MemoryStore()))
    with ServerThread(app) as s:
        yield Served((RunningProxy(s, app, settings.ledger), upstream))
    upstream.close()


class Served(tuple):
    def __repr__(self) -> str:  # hypothesis prints its arguments on a failure: keep it short
        return "<proxy and raw upstream>"


TURNS = st.lists(st.tuples(st.integers(-2, 9), st.none() | st.integers(0, 20)), min_size=1, max_size=9)


@pytest.mark.slow
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(api=st.sampled_from(["responses", "anthropic"]), turns=TURNS)
def test_generated_bodies_never_5xx_and_keep_opaque_bytes(server, api, turns):
    proxy, upstream = server
    turns = [(odd, bad if bad is not None and bad < 8 else None) for odd, bad in turns]
    body = (responses_body if api == "responses" else anthropic_body)(turns)
    raw = json.dumps(body).encode()
    before = len(upstream.received)
    r = httpx.post(proxy.url + PATH[api], content=raw, timeout=30,
                   headers={"content-type": "application/json",
                            "x-session-id": f"fuzz-{api}-{hashlib.sha256(raw).hexdigest()[:16]}"})
    assert r.status_code < 500, r.text
    if r.status_code >= 400:
        err = r.json()
        if api == "anthropic":
            assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
        else:
            assert set(err["error"]) == {"message", "type", "param", "code"}
        assert len(upstream.received) == before
        assert any(b is not None for _, b in turns), "a valid body was refused"
        return
    sent = upstream.received[-1].body
    text = sent.decode()
    assert in_order(text, opaque_texts(api, body)), "opaque items changed, dropped or moved"
    got = json.loads(sent)
    tools = got.get("tools")
    if isinstance(tools, list) and tools and tool_name(tools[-1]) == "context_recall":
        got["tools"] = tools[:-1]  # recall's one addition, once a rewrite of the session was lossy
    assert {k: v for k, v in got.items() if k != CONVERSATION[api]} == {
        k: v for k, v in body.items() if k != CONVERSATION[api]}
