"""context_recall on Gemini's Interactions API, answered inside the proxy: the real
google-genai SDK (its ``interactions`` client), a real proxy, and a loopback upstream that
answers and stores interactions as the API does, with the recall script of
tests/fakes/recall_upstream.py (``decide``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from context_engine.proxy.dialects.interactions.recall import INTERACTIONS, TOOL
from tests.fakes.recall_upstream_interactions import LEAD, InteractionsRecallUpstream
from tests.test_recall import LINES, recall_proxies

genai = pytest.importorskip("google.genai")

LOOKUP: dict[str, Any] = {"type": "function", "name": "lookup", "description": "Look up a fact.",
                          "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}
CLIENTS: list[Any] = []  # a client closes its connections when it is collected


@pytest.fixture(scope="module")
def up():
    with InteractionsRecallUpstream() as server:
        yield server


@pytest.fixture
def proxy(up, tmp_path):
    with recall_proxies(up.url, tmp_path) as start:
        yield start


def client(p: Any) -> Any:
    CLIENTS.append(genai.Client(api_key="gm-key", http_options={"base_url": p.url, "api_version": "v1beta"}))
    return CLIENTS[-1]


def steps(question: str = "What did sensor-100 read?") -> list[dict[str, Any]]:
    return [
        {"type": "user_input", "content": [{"type": "text", "text": "Check the sensors."}]},
        {"type": "function_call", "id": "call_1", "name": "lookup", "arguments": {}},
        {"type": "function_result", "call_id": "call_1", "name": "lookup", "result": LINES},
        {"type": "user_input", "content": [{"type": "text", "text": question}]},
    ]


def create(p: Any, model: str, **kw: Any) -> Any:
    kw = {"input": steps(), "tools": [LOOKUP], "system_instruction": "You are terse.", **kw}
    return client(p).interactions.create(model=model, **kw)


def test_recall_is_answered_inside_the_proxy_and_the_chain_continues(proxy, up):
    p = proxy()
    before = len(up.requests)
    r = create(p, "recall-id")
    first, second = up.requests[before:]
    assert first["tools"] == [LOOKUP, TOOL]
    cut = first["input"][2]["result"]
    assert "row 100:" not in cut and "(context_recall)]" in cut
    # the follow-up continues the interaction the recall round created, with the answer
    assert second["previous_interaction_id"] == f"v1_int{before + 1}"
    assert second["input"] == [{"type": "function_result", "call_id": "call_r1",
                                "name": "context_recall", "result": LINES}]
    assert second["tools"] == first["tools"] and second["system_instruction"] == "You are terse."
    # one reply, without the tool: the final interaction, its usage summed over the rounds
    assert r.id == f"v1_int{before + 2}" and r.status == "completed"
    assert [s.type for s in r.steps] == ["model_output"] and r.output_text == "I read: " + LINES
    assert r.previous_interaction_id is None and [t.name for t in r.tools] == ["lookup"]
    assert r.usage.total_input_tokens == sum(up.prompts[before:]) and r.usage.total_output_tokens == 10
    row = p.rows()[-1]
    assert (row["api"], row["recall_rounds"], row["recall_prompt_tokens"]) == ("interactions", 1, up.prompts[-1])
    assert row["prompt_tokens"] == sum(up.prompts[before:])
    # the id the client got is the one the server holds the whole chain under
    nxt = client(p).interactions.create(model="plain", previous_interaction_id=r.id, input="Thanks.",
                                        tools=[LOOKUP])
    assert nxt.status == "completed" and up.requests[-1]["previous_interaction_id"] == r.id
    held = up.stored[nxt.id]
    assert {"type": "function_result", "call_id": "call_r1", "name": "context_recall", "result": LINES} in held


def test_a_stream_is_answered_inside_and_reads_as_one_interaction(proxy, up):
    p = proxy()
    before = len(up.requests)
    events = list(create(p, "recall-id", stream=True, store=False))
    first, second = up.requests[before:]
    assert first["tools"][-1] == TOOL and second["tools"] == first["tools"]
    cut = first["input"][2]["result"]
    # nothing stored: the follow-up repeats the input, the reply's steps and the answer
    assert "previous_interaction_id" not in second
    assert second["input"][:4] == first["input"]
    assert second["input"][4:] == [
        {"type": "model_output", "content": [{"type": "text", "text": LEAD}]},
        {"type": "function_call", "id": "call_r1", "name": "context_recall",
         "arguments": {"id": "orig:" + cut.split("orig:")[1][:12]}},
        {"type": "function_result", "call_id": "call_r1", "name": "context_recall", "result": LINES}]
    kinds = [e.event_type for e in events]
    assert kinds.count("interaction.created") == 1 and kinds[-1] == "interaction.completed"
    assert kinds.count("interaction.completed") == 1
    assert "context_recall" not in json.dumps([e.model_dump(mode="json") for e in events])
    text = "".join(e.delta.text for e in events if e.event_type == "step.delta" and e.delta.type == "text")
    assert text == LEAD + LEAD + "I read: " + LINES
    starts = [e.index for e in events if e.event_type == "step.start"]
    assert starts == [0, 1, 2]
    done = events[-1].interaction
    assert done.id == events[0].interaction.id == f"v1_int{before + 1}" and done.status == "completed"
    assert done.usage.total_input_tokens == sum(up.prompts[before:]) and done.usage.total_output_tokens == 10
    row = p.rows()[-1]
    assert (row["stream"], row["recall_rounds"], row["prompt_tokens"]) == (1, 1, sum(up.prompts[before:]))


def test_a_mixed_reply_answers_recall_first_and_the_client_gets_its_call(proxy, up):
    p = proxy()
    before = len(up.requests)
    r = create(p, "recall-mixed")
    first, follow = up.requests[before:]
    assert "previous_interaction_id" not in follow  # the round's interaction holds the client's call
    assert follow["input"][:4] == first["input"]
    assert follow["input"][4:] == [
        {"type": "function_call", "id": "call_r1", "name": "context_recall",
         "arguments": follow["input"][4]["arguments"]},
        {"type": "function_result", "call_id": "call_r1", "name": "context_recall", "result": LINES}]
    assert r.status == "requires_action" and [(s.type, s.name) for s in r.steps] == [("function_call", "lookup")]


def test_a_stored_stream_gets_no_tool(proxy, up):
    events = list(create(proxy(), "recall-id", stream=True))
    assert "context_recall" not in json.dumps(up.requests[-1]["tools"])
    text = "".join(e.delta.text for e in events if e.event_type == "step.delta" and e.delta.type == "text")
    assert text == LEAD + "no recall offered"


@pytest.mark.parametrize("stream", [False, True])
def test_an_id_the_session_never_produced_answers_not_found(proxy, up, stream):
    got = create(proxy(), "recall-unknown", stream=stream, store=False)
    if stream:
        got = list(got)
        text = "".join(e.delta.text for e in got if e.event_type == "step.delta" and e.delta.type == "text")
    else:
        text = got.output_text
    assert text.endswith("I read: not found: orig:000000000000 (no such id in this conversation)")


def test_the_last_round_goes_without_the_tool(proxy, up):
    p = proxy(recall={"max_rounds": 2})
    before = len(up.requests)
    r = create(p, "recall-loop")
    assert r.output_text == "gave up after 2 recall results"
    sent = up.requests[before:]
    assert ["context_recall" in json.dumps(b["tools"]) for b in sent] == [True, True, False]
    assert [b.get("previous_interaction_id") for b in sent] == [None, f"v1_int{before + 1}", f"v1_int{before + 2}"]


def test_the_tool_is_offered_only_where_the_model_may_call_it():
    base = {"model": "m", "input": "hi", "tools": [LOOKUP]}
    assert INTERACTIONS.can_offer(base) and INTERACTIONS.can_offer({**base, "stream": True, "store": False})
    offs: list[dict[str, Any]] = [
        {"tools": []}, {"tools": [{"type": "google_search"}]}, {"tools": [LOOKUP, TOOL]},
        {"stream": True}, {"background": True}, {"agent": "deep-research"},
        {"cached_content": "cachedContents/x"}, {"generation_config": {"tool_choice": "none"}},
        {"generation_config": {"tool_choice": {"allowed_tools": {"mode": "any", "tools": ["lookup"]}}}}]
    for no in offs:
        assert not INTERACTIONS.can_offer({**base, **no}), no
    assert INTERACTIONS.can_offer({**base, "generation_config": {"tool_choice": "any"}})


def test_a_relayed_reply_hides_its_recall_calls():
    reader = INTERACTIONS.reader()
    events: list[dict[str, Any]] = [
        {"event_type": "interaction.created", "interaction": {"id": "v1_a", "status": "in_progress"}},
        {"event_type": "step.start", "index": 0, "step": {"type": "function_call", "id": "c1",
                                                           "name": "lookup", "arguments": {}}},
        {"event_type": "step.start", "index": 1, "step": {"type": "function_call", "id": "c2",
                                                           "name": "context_recall", "arguments": {}}},
        {"event_type": "step.delta", "index": 1, "delta": {"type": "arguments_delta", "arguments": '{"id":'}},
        {"event_type": "step.delta", "index": 1, "delta": {"type": "arguments_delta", "arguments": '"#1"}'}},
        {"event_type": "step.start", "index": 2, "step": {"type": "model_output"}},
        {"event_type": "interaction.completed", "interaction": {"id": "v1_a", "status": "requires_action",
                                                                 "steps": []}},
    ]
    assert [reader.take(e) for e in events] == [False, False, True, False, False, False, False]
    assert reader.hold.client_first
    shown: list[Any] = [reader.hide(e) for e in events]
    assert shown[3] is None and shown[4] is None and shown[2] is None
    assert shown[5] == {**events[5], "index": 1} and shown[1] is events[1]
    assert shown[6]["interaction"]["status"] == "requires_action"  # the client's call is left
    turn = reader.turn()
    assert [(c.id, c.arguments) for c in turn.calls] == [("c2", {"id": "#1"})] and turn.others == 1
    assert turn.reply["id"] == "v1_a"


def test_a_relayed_reply_with_only_recall_calls_reads_as_done():
    reader = INTERACTIONS.reader()
    call = {"event_type": "step.start", "index": 0, "step": {"type": "function_call", "id": "c1",
                                                             "name": "context_recall", "arguments": {"id": "#1"}}}
    update = {"event_type": "interaction.status_update", "interaction_id": "v1_a", "status": "requires_action"}
    done = {"event_type": "interaction.completed", "interaction": {"id": "v1_a", "status": "requires_action",
                                                                   "steps": [call["step"]]}}
    assert reader.take(call) and not reader.take(update) and not reader.take(done)
    shown: list[Any] = [reader.hide(e) for e in (call, update, done)]
    assert shown[0] is None and shown[1]["status"] == "completed"
    assert shown[2]["interaction"] == {"id": "v1_a", "status": "completed", "steps": []}
    assert [c.arguments for c in reader.turn().calls] == [{"id": "#1"}]
