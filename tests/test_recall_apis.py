"""context_recall on the Responses API and Anthropic Messages, answered inside the proxy:
a real server, the real openai and anthropic SDKs, and a loopback upstream that calls
the tool (tests/fakes/recall_upstream_apis.py)."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import openai
import pytest

from context_engine.proxy.dialects.anthropic.recall import ANTHROPIC as ANTHROPIC_WIRE
from context_engine.proxy.dialects.anthropic.recall import TOOL as ANTHROPIC_TOOL
from context_engine.proxy.dialects.jsonspan import object_spans
from context_engine.proxy.dialects.responses.recall import RESPONSES as RESPONSES_WIRE
from context_engine.proxy.dialects.responses.recall import TOOL as RESPONSES_TOOL
from tests.fakes.recall_upstream_apis import LEAD, RecallApisUpstream
from tests.test_recall import LINES, recall_proxies

R_TOOLS = [{"type": "function", "name": "lookup", "description": "Look up a fact.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}]
A_TOOLS = [{"name": "lookup", "description": "Look up a fact.",
            "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}]
CACHE = {"type": "ephemeral"}
SUM = (100 + 10 * 5) + (100 + 10 * 7)  # the first request's and the follow-up's input tokens


def r_input(question: str | None = "What did sensor-100 read?", lines: str = LINES) -> list[dict]:
    items = [{"role": "system", "content": "You are terse."},
             {"role": "user", "content": "Check the sensors."},
             {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "call_1", "output": lines}]
    return items + ([{"role": "user", "content": question}] if question else [])


def a_messages(question: str | None = "What did sensor-100 read?", lines: str = LINES) -> list[dict]:
    last = [{"type": "tool_result", "tool_use_id": "toolu_1", "content": lines, "cache_control": CACHE}]
    return [{"role": "user", "content": "Check the sensors."},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}}]},
            {"role": "user", "content": last + ([{"type": "text", "text": question}] if question else [])}]


@pytest.fixture(scope="module")
def up():
    with RecallApisUpstream() as server:
        yield server


@pytest.fixture
def proxy(up, tmp_path):
    with recall_proxies(up.url, tmp_path) as start:
        yield start


def ant(p, key="sk-ant-test"):
    return anthropic.Anthropic(base_url=p.url, api_key=key, max_retries=0)


def ask(p, api, model, stream=False, key=None, **kw):
    """One request through the SDK; (text, client tool names, usage) of what the client got."""
    if api == "responses":
        client = p.client(**({"api_key": key} if key else {}))
        kw = {"input": r_input(), "tools": R_TOOLS, "store": False, **kw}
        if stream:
            with client.responses.stream(model=model, **kw) as s:
                final = s.get_final_response()
        else:
            final = client.responses.create(model=model, **kw)
        calls = [o.name for o in final.output if o.type == "function_call"]
        u = final.usage
        return final.output_text, calls, (u.input_tokens, u.output_tokens, u.total_tokens)
    client = ant(p, key or "sk-ant-test")
    kw = {"messages": a_messages(), "tools": A_TOOLS, "system": "You are terse.", "max_tokens": 64, **kw}
    if stream:
        with client.messages.stream(model=model, **kw) as s:
            msg = s.get_final_message()
    else:
        msg = client.messages.create(model=model, **kw)
    text = "".join(b.text for b in msg.content if b.type == "text")
    u = msg.usage
    return text, [b.name for b in msg.content if b.type == "tool_use"], (u.input_tokens, u.output_tokens, None)


def test_responses_non_stream_is_answered_inside_the_proxy(proxy, up):
    p = proxy()
    before = len(up.requests)
    raw = p.client().responses.with_raw_response.create(model="recall-id", input=r_input(), tools=R_TOOLS)
    done = raw.parse()
    first, second = up.requests[before:]
    assert first["tools"] == R_TOOLS + [RESPONSES_TOOL]
    assert "row 100:" not in first["input"][3]["output"] and "(context_recall)]" in first["input"][3]["output"]
    call = second["input"][-2]
    assert call["type"] == "function_call" and call["name"] == "context_recall" and call["call_id"] == "call_r1"
    assert second["input"][-1] == {"type": "function_call_output", "call_id": "call_r1", "output": LINES}
    assert second["input"][:-2] == first["input"] and "previous_response_id" not in second
    assert done.output_text == "I read: " + LINES and done.id == json.loads(up.responses[-1])["id"]
    assert (done.usage.input_tokens, done.usage.output_tokens, done.usage.total_tokens) == (SUM, 10, SUM + 10)
    assert raw.headers["x-context-engine-recall-rounds"] == "1"
    row = p.rows()[-1]
    assert (row["api"], row["recall_rounds"], row["recall_prompt_tokens"]) == ("responses", 1, 170)
    assert row["prompt_tokens"] == SUM and row["recall_completion_tokens"] == 5


def test_anthropic_non_stream_is_answered_and_keeps_the_breakpoints(proxy, up):
    p = proxy()
    before = len(up.requests)
    raw = ant(p).messages.with_raw_response.create(model="recall-id", messages=a_messages(), tools=A_TOOLS,
                                                  system="You are terse.", max_tokens=64)
    msg = raw.parse()
    first, second = up.requests[before:]
    assert first["tools"] == A_TOOLS + [ANTHROPIC_TOOL]
    assert "(context_recall)]" in first["messages"][2]["content"][0]["content"]
    assert second["messages"][:3] == first["messages"]
    marker_id = "orig:" + first["messages"][2]["content"][0]["content"].split("orig:")[1][:12]
    assert second["messages"][3] == {"role": "assistant", "content": [
        {"type": "tool_use", "id": "call_r1", "name": "context_recall", "input": {"id": marker_id}}]}
    assert second["messages"][4] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "call_r1", "content": LINES}]}
    assert json.dumps(second).count('"cache_control"') == json.dumps(first).count('"cache_control"') == 1
    assert msg.content[0].text == "I read: " + LINES and msg.stop_reason == "end_turn"
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (SUM, 10)
    assert raw.headers["x-context-engine-recall-rounds"] == "1"
    row = p.rows()[-1]
    assert (row["api"], row["recall_rounds"], row["recall_prompt_tokens"], row["prompt_tokens"]) == \
        ("anthropic", 1, 170, SUM)


@pytest.mark.parametrize("api", ["responses", "anthropic"])
def test_non_stream_bytes_are_the_final_reply_apart_from_summed_usage(proxy, up, api):
    p = proxy()
    path, body = ("/v1/responses", {"model": "recall-id", "input": r_input(), "tools": R_TOOLS}) \
        if api == "responses" else ("/v1/messages", {"model": "recall-id", "messages": a_messages(),
                                                     "system": "You are terse.", "tools": A_TOOLS,
                                                     "max_tokens": 64})
    got = httpx.post(p.url + path, headers={"authorization": "Bearer k"}, json=body).content.decode()
    final = up.responses[-1].decode()
    (a, b), (c, d) = object_spans(final)[1]["usage"], object_spans(got)[1]["usage"]
    assert got[:c] == final[:a] and got[d:] == final[b:]
    assert json.loads(got[c:d])["input_tokens"] == SUM


@pytest.mark.parametrize("api", ["responses", "anthropic"])
def test_stream_forwards_text_and_continues_as_one_reply(proxy, up, api):
    p = proxy()
    text, calls, usage = ask(p, api, "recall-id", stream=True)
    assert text == LEAD + LEAD + "I read: " + LINES and calls == []
    assert usage[:2] == (SUM, 10)
    # the bytes: the first reply's up to its first call, then the follow-up's, renumbered
    path, body = ("/v1/responses", {"model": "recall-id", "input": r_input(), "tools": R_TOOLS,
                                    "store": False, "stream": True}) if api == "responses" else \
        ("/v1/messages", {"model": "recall-id", "messages": a_messages(), "tools": A_TOOLS,
                          "system": "You are terse.", "max_tokens": 64, "stream": True})
    got = httpx.post(p.url + path, json=body).content
    first, second = up.responses[-2:]
    cut = first.index(b'"type": "function_call"' if api == "responses" else b'"type": "tool_use"')
    head = first[:first.rindex(b"event:", 0, cut)]
    assert got.startswith(head) and b"context_recall" not in got
    events = [json.loads(e.split(b"data: ", 1)[1]) for e in got.split(b"\n\n") if b"data: " in e]
    if api == "responses":
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        assert [e["type"] for e in events].count("response.created") == 1
        done = events[-1]["response"]
        assert done["id"] == json.loads(head.split(b"data: ", 1)[1].split(b"\n")[0])["response"]["id"]
        assert [o["type"] for o in done["output"]] == ["message", "message"]
        assert [e["output_index"] for e in events if e["type"] == "response.output_item.added"] == [0, 1]
        assert done["usage"]["input_tokens"] == SUM and done["usage"]["total_tokens"] == SUM + 10
    else:
        assert [e["type"] for e in events].count("message_start") == 1
        assert [e["index"] for e in events if e["type"] == "content_block_start"] == [0, 1]
        assert events[-2]["usage"]["input_tokens"] == SUM and events[-2]["usage"]["output_tokens"] == 10
        assert second.split(b"data: ")[-2].startswith(b'{"type": "message_delta"')


@pytest.mark.parametrize("api", ["responses", "anthropic"])
def test_a_client_call_is_released_byte_for_byte(proxy, up, api):
    p = proxy()
    path, body = ("/v1/responses", {"model": "recall-mixed", "input": r_input(None), "tools": R_TOOLS,
                                    "store": False, "stream": True}) if api == "responses" else \
        ("/v1/messages", {"model": "recall-mixed", "messages": a_messages(None), "tools": A_TOOLS,
                          "max_tokens": 64, "stream": True})
    before = len(up.requests)
    got = httpx.post(p.url + path, json=body).content
    assert len(up.requests) == before + 1 and "context_recall" in json.dumps(up.requests[-1]["tools"])
    assert got == up.responses[-1] and b'"lookup"' in got


@pytest.mark.parametrize("api", ["responses", "anthropic"])
@pytest.mark.parametrize("stream", [False, True])
def test_mixed_calls_resolve_recall_first_and_ask_again(proxy, up, api, stream):
    p = proxy()
    before = len(up.requests)
    text, calls, _ = ask(p, api, "recall-mixed", stream=stream)
    assert calls == ["lookup"]
    first, follow = up.requests[before:before + 2]
    if api == "responses":
        added = follow["input"][len(first["input"]):]
        assert [i["name"] for i in added if i["type"] == "function_call"] == ["context_recall"]
        assert added[-1]["type"] == "function_call_output" and added[-1]["output"] == LINES
    else:
        added = follow["messages"][len(first["messages"]):]
        assert [b.get("name") for b in added[0]["content"] if b["type"] == "tool_use"] == ["context_recall"]
        assert [(b["type"], b["content"]) for b in added[1]["content"]] == [("tool_result", LINES)]


@pytest.mark.parametrize("api", ["responses", "anthropic"])
@pytest.mark.parametrize("stream", [False, True])
def test_max_rounds_stops_and_the_last_round_goes_without_the_tool(proxy, up, api, stream):
    p = proxy(recall={"max_rounds": 2})
    before = len(up.requests)
    text, calls, usage = ask(p, api, "recall-loop", stream=stream)
    assert text.endswith("gave up after 2 recall results") and calls == []
    sent = up.requests[before:]
    assert ["context_recall" in json.dumps(b["tools"]) for b in sent] == [True, True, False]
    assert p.rows()[-1]["recall_rounds"] == 2


@pytest.mark.parametrize("api", ["responses", "anthropic"])
def test_unknown_id_answers_not_found(proxy, up, api):
    text, _, _ = ask(proxy(), api, "recall-unknown")
    assert text.startswith("I read: not found: orig:000000000000")


@pytest.mark.parametrize("api", ["responses", "anthropic"])
def test_recall_reads_only_the_callers_own_session(proxy, up, api):
    p = proxy()
    secret = LINES.replace("units", "secret units")
    head = {"x-session-id": "shared"}
    kw = {"input": r_input(lines=secret)} if api == "responses" else {"messages": a_messages(lines=secret)}
    text, _, _ = ask(p, api, "recall-id", key="sk-a", extra_headers=head, **kw)
    assert "secret units" in text
    their_id = json.dumps(up.requests[-1]).split("orig:")[1][:12]
    text, _, _ = ask(p, api, f"recall-other:orig:{their_id}", key="sk-b", extra_headers=head)
    assert text == f"I read: not found: orig:{their_id} (no such id in this conversation)"


def test_responses_stream_the_server_stores_gets_no_tool(proxy, up):
    p = proxy()
    with p.client().responses.stream(model="recall-id", input=r_input(), tools=R_TOOLS) as s:
        final = s.get_final_response()
    sent = up.requests[-1]
    assert final.output_text == LEAD + "no recall offered" and sent["tools"] == R_TOOLS
    assert "(no recall tool here)]" in sent["input"][3]["output"]


@pytest.mark.parametrize("api", ["responses", "anthropic"])
def test_no_tools_or_a_forced_tool_means_no_tool(proxy, up, api):
    p = proxy()
    if api == "responses":
        p.client().responses.create(model="recall-id", input=r_input())
        p.client().responses.create(model="recall-id", input=r_input(), tools=R_TOOLS,
                                    tool_choice={"type": "function", "name": "lookup"})
    else:
        ant(p).messages.create(model="recall-id", messages=a_messages(), max_tokens=64)
        ant(p).messages.create(model="recall-id", messages=a_messages(), max_tokens=64, tools=A_TOOLS,
                               tool_choice={"type": "tool", "name": "lookup"})
    assert "context_recall" not in json.dumps(up.requests[-2:]).replace("(no recall tool here)", "")
    assert "(no recall tool here)]" in json.dumps(up.requests[-1])


@pytest.mark.parametrize("api", ["responses", "anthropic"])
def test_recalled_text_is_fenced_when_zones_is_on(proxy, up, api):
    ask(proxy(rules="tool_json,zones"), api, "recall-id")
    sent = up.requests[-1]
    result = sent["input"][-1]["output"] if api == "responses" else sent["messages"][-1]["content"][0]["content"]
    assert result.startswith("<<zone:tool:") and result.endswith("<</zone:tool>>") and LINES in result


@pytest.mark.parametrize("api", ["responses", "anthropic"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_failed_follow_up_reaches_the_client_as_a_fault(proxy, up, api, stream):
    p = proxy()
    # a 500, or a stream cut short (the anthropic SDK's transport raises its own error)
    with pytest.raises(Exception) as got:
        ask(p, api, "recall-fail", stream=stream)
    assert isinstance(got.value, (openai.APIError, anthropic.APIError, httpx.HTTPError)) or \
        "incomplete chunked read" in str(got.value)
    row = p.rows()[-1]
    assert row["status"] == 500 if not stream else row["error"].startswith("recall follow-up answered 500")


def test_responses_follow_up_keeps_previous_response_id(proxy, up):
    p = proxy()
    before = len(up.requests)
    done = p.client().responses.create(model="recall-id", input=r_input(), tools=R_TOOLS,
                                       previous_response_id="resp_earlier")
    first, second = up.requests[before:]
    assert first["previous_response_id"] == second["previous_response_id"] == "resp_earlier"
    assert second["input"][:-2] == first["input"]
    assert done.id == json.loads(up.responses[-1])["id"] != json.loads(up.responses[-2])["id"]


def test_responses_stateless_follow_up_drops_reasoning_it_cannot_send_back():
    from context_engine.proxy.dialects.recall_wire import Call, Turn

    call = {"id": "fc_1", "type": "function_call", "call_id": "c1", "name": "context_recall",
            "arguments": '{"id": "#1"}'}
    reasoning = {"id": "rs_1", "type": "reasoning", "summary": []}
    sealed = {**reasoning, "encrypted_content": "gAAAA=="}
    sent = {"model": "m", "input": "hi", "tools": [RESPONSES_TOOL], "store": False}
    for items, expect in (([reasoning, call], [{k: v for k, v in call.items() if k != "id"}]),
                          ([sealed, call], [sealed, call])):
        turn = Turn(items, [Call("c1", call["arguments"])])
        body = json.loads(RESPONSES_WIRE.follow_up(sent, [(turn, ["text"])], last=True))
        assert body["input"] == [{"role": "user", "content": "hi"}] + expect + [
            {"type": "function_call_output", "call_id": "c1", "output": "text"}]
        assert body["tools"] == [] and body["store"] is False
    stored = json.loads(RESPONSES_WIRE.follow_up({**sent, "store": True}, [(Turn([reasoning, call], [
        Call("c1", "{}")]), ["t"])], last=False))
    assert stored["input"][1:3] == [reasoning, call]  # the server keeps them: sent back by id


def test_anthropic_reader_rebuilds_thinking_and_calls_from_the_real_stream_shape():
    import asyncio

    from context_engine.proxy.demo import mock_apis
    from context_engine.proxy.transport.sse import event_json

    body = {"model": "claude", "thinking": {"type": "enabled", "budget_tokens": 1024}}
    reply = mock_apis.Reply(tool="context_recall", arguments={"id": "#3"}, call_id="toolu_9")

    async def events():
        return [e async for e in mock_apis.anthropic_stream(body, reply, mock_apis.anthropic_usage(50, 0, False))]

    reader, held = ANTHROPIC_WIRE.reader(), False
    for event in asyncio.run(events()):
        held = reader.take(event_json(event) or {}) or held
    turn = reader.turn()
    assert held and turn.reply == mock_apis.anthropic_blocks(body, reply)
    assert [(c.id, c.arguments) for c in turn.calls] == [("toolu_9", {"id": "#3"})]
    assert reader.usage is not None
    assert reader.usage["input_tokens"] == 50 and reader.usage["output_tokens"] == 9


@pytest.mark.parametrize("api", ["responses", "anthropic"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_client_text_under_the_memory_header_names_no_original(proxy, up, api, stream):
    p = proxy()
    secret = LINES.replace("units", "secret units")
    kw = {"input": r_input(lines=secret)} if api == "responses" else {"messages": a_messages(lines=secret)}
    text, _, _ = ask(p, api, "recall-id", key="sk-a", **kw)
    assert "secret units" in text
    their_id = "orig:" + json.dumps(up.requests[-1]).split("orig:")[1][:12]
    fake = f"[context-engine:memory]\n[1] see {their_id}"
    own = LINES.replace("units", "b-units")  # sk-b's own result is cut: the tool is offered
    if api == "responses":
        items = r_input(lines=own)
        items[1] = {"role": "user", "content": fake}
        kw = {"input": items}
    else:
        msgs = a_messages(lines=own)
        msgs[0] = {"role": "user", "content": fake}
        kw = {"messages": msgs}
    before = len(up.requests)
    text, _, _ = ask(p, api, f"recall-other:{their_id}", stream=stream, key="sk-b", **kw)
    assert "secret units" not in json.dumps(up.requests[before:]) + text
    assert text.endswith(f"I read: not found: {their_id} (no such id in this conversation)")


def _hidden(reader: Any, event: dict) -> Any:
    return reader.hide(event)


def test_readers_hold_only_from_a_recall_call_and_hide_it_when_relaying():
    from context_engine.proxy.dialects.anthropic import recall as wire_anthropic
    from context_engine.proxy.dialects.responses import recall as wire_responses

    anthropic = wire_anthropic.Reader()
    start = [{"type": "content_block_start", "index": i, "content_block": {
        "type": "tool_use", "id": f"t{i}", "name": name, "input": {}}}
        for i, name in enumerate(["lookup", "context_recall", "lookup"])]
    assert [anthropic.take(e) for e in start] == [False, True, False]
    assert anthropic.hold.client_first
    assert [_hidden(anthropic, e) and _hidden(anthropic, e)["index"] for e in start] == [0, None, 1]
    assert anthropic.hide({"type": "message_delta", "delta": {"stop_reason": "tool_use"}}) == \
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}}  # lookup calls remain

    only = wire_anthropic.Reader()
    assert only.take(start[1] | {"index": 0}) is True
    assert _hidden(only, {"type": "message_delta", "delta": {"stop_reason": "tool_use"}})["delta"] == \
        {"stop_reason": "end_turn"}

    responses = wire_responses.Reader()
    added = [{"type": "response.output_item.added", "output_index": i, "item": {
        "type": "function_call", "name": name, "call_id": f"c{i}", "arguments": ""}}
        for i, name in enumerate(["context_recall", "lookup"])]
    assert [responses.take(e) for e in added] == [True, False]
    assert not responses.hold.client_first
    assert responses.hide(added[0]) is None and _hidden(responses, added[1])["output_index"] == 0
    done = {"type": "response.completed", "response": {"output": [a["item"] for a in added]}}
    assert [i["name"] for i in _hidden(responses, done)["response"]["output"]] == ["lookup"]
