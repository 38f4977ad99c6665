"""Recall streaming holds a reply only from a ``context_recall`` call: the client's own
calls stream as they come; a reply that cannot be asked again, or held past
``recall.max_held_bytes``, is relayed with its recall calls left out."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.fakes.recall_upstream import RecallUpstream
from tests.test_recall import TOOLS, history, recall_proxies


@pytest.fixture(scope="module")
def up():
    with RecallUpstream() as server:
        yield server


@pytest.fixture
def proxy(up, tmp_path):
    with recall_proxies(up.url, tmp_path) as start:
        yield start


def _stream_chunks(p, model: str) -> tuple[bytes, list[dict]]:
    r = httpx.post(p.url + "/v1/chat/completions", headers={"authorization": "Bearer k"},
                   json={"model": model, "messages": history(), "tools": TOOLS, "stream": True})
    assert r.status_code == 200
    events = [json.loads(e[6:]) for e in r.content.split(b"\n\n") if e.startswith(b"data: {")]
    return r.content, events


def test_a_client_tool_call_streams_as_it_comes_when_recall_is_offered(proxy, up):
    p = proxy()
    up.gate.clear()
    up.gate_timed_out = False
    seen_call = False
    with httpx.stream("POST", p.url + "/v1/chat/completions", headers={"authorization": "Bearer k"},
                      json={"model": "lookup-gated", "messages": history(), "tools": TOOLS,
                            "stream": True}, timeout=30) as r:
        for line in r.iter_lines():
            if '"tool_calls"' in line and not seen_call:
                seen_call = True
                up.gate.set()  # the upstream finishes the reply only once the client saw the call
    assert seen_call and not up.gate_timed_out
    assert up.requests[-1]["tools"][-1]["function"]["name"] == "context_recall"  # it was offered


def test_a_recall_call_after_a_client_call_went_out_is_left_out_not_asked_again(proxy, up):
    p = proxy()
    before = len(up.requests)
    raw, events = _stream_chunks(p, "lookup-then-recall")
    assert len(up.requests) - before == 1  # no follow-up: the client already has lookup
    assert b"context_recall" not in raw and raw.endswith(b"data: [DONE]\n\n")
    calls = [c for e in events for c in e["choices"][0]["delta"].get("tool_calls") or []]
    assert {c["index"] for c in calls} == {0} and calls[0]["function"]["name"] == "lookup"
    assert events[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_a_held_reply_past_max_held_bytes_is_relayed_without_its_recall_call(proxy, up):
    p = proxy(recall={"max_held_bytes": 2048})
    before = len(up.requests)
    raw, events = _stream_chunks(p, "recall-huge")
    assert len(up.requests) - before == 1
    assert b"context_recall" not in raw and b"sensor sensor" not in raw
    assert raw.endswith(b"data: [DONE]\n\n")
    assert "".join(e["choices"][0]["delta"].get("content") or "" for e in events) == "Let me check. "
    assert events[-1]["choices"][0]["finish_reason"] == "stop"  # no call is left for the client


# --- the Responses API and Anthropic Messages, through their SDKs --------------------------

from tests.fakes.recall_upstream_apis import RecallApisUpstream  # noqa: E402
from tests.test_recall_apis import A_TOOLS, R_TOOLS, a_messages, ask, r_input  # noqa: E402


@pytest.fixture(scope="module")
def apis_up():
    with RecallApisUpstream() as server:
        yield server


@pytest.mark.parametrize("api", ["responses", "anthropic"])
def test_a_recall_call_after_a_client_call_is_left_out_on_every_api(apis_up, tmp_path, api):
    with recall_proxies(apis_up.url, tmp_path) as start:
        p = start()
        before = len(apis_up.requests)
        text, calls, _ = ask(p, api, "lookup-then-recall", stream=True)
        assert calls == ["lookup"] and len(apis_up.requests) - before == 1
        path, body = ("/v1/responses", {"model": "lookup-then-recall", "input": r_input(),
                                        "tools": R_TOOLS, "store": False, "stream": True}) \
            if api == "responses" else \
            ("/v1/messages", {"model": "lookup-then-recall", "messages": a_messages(),
                              "tools": A_TOOLS, "max_tokens": 64, "stream": True})
        got = httpx.post(p.url + path, json=body).content
        assert b"context_recall" not in got and b'"lookup"' in got
