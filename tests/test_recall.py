"""context_recall answered inside the proxy: a real server, the real openai SDK, and a
loopback upstream that calls the tool (tests/fakes/recall_upstream.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os

import httpx
import pytest

from context_engine.proxy.demo.mock_upstream import ServerThread
from context_engine.proxy.dialects.jsonspan import object_spans
from context_engine.proxy.edge.app import create_app
from context_engine.proxy.engine.engine import Engine
from context_engine.proxy.engine.originals import keep_original, stored_original
from context_engine.proxy.engine.recall_resolve import RecallScope, resolve
from context_engine.proxy.reporting import report
from context_engine.proxy.settings import load_settings
from context_engine.proxy.store.stores import DiskStore, MemoryStore
from tests.conftest import RunningProxy
from tests.fakes.recall_upstream import RecallUpstream

LINES = "\n".join(f"row {i}: sensor-{i} read {i * 7 % 101} units" for i in range(200))
TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "Look up a fact.",
                                           "parameters": {"type": "object", "properties": {
                                               "q": {"type": "string"}}}}}]


def history(question: str = "What did sensor-100 read?", lines: str = LINES) -> list[dict]:
    return [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Check the sensors."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": lines},
        {"role": "user", "content": question},
    ]


@pytest.fixture(scope="module")
def up():
    with RecallUpstream() as server:
        yield server


@contextlib.contextmanager
def recall_proxies(upstream_url, tmp_path):
    """Start proxies with real rules (by name) in front of a recall upstream."""
    running: list[ServerThread] = []

    def start(store=None, **flags):
        flags.setdefault("rules", "tool_json")
        flags.setdefault("rule_options", {"tool_json": {"max_chars": 600}})
        flags.update(store="memory://", rules_deadline_ms=0, upstream=upstream_url + "/v1",
                     ledger=str(tmp_path / f"ledger{len(running)}.db"))
        settings = load_settings(flags=flags, env={}, config_path=os.devnull)
        app = create_app(settings, engine=Engine(settings, store=store or MemoryStore()))
        running.append(ServerThread(app).__enter__())
        return RunningProxy(running[-1], app, settings.ledger)

    try:
        yield start
    finally:
        for server in running:
            server.__exit__(None, None, None)


@pytest.fixture
def proxy(up, tmp_path):
    with recall_proxies(up.url, tmp_path) as start:
        yield start


def test_non_stream_recall_is_answered_inside_the_proxy(proxy, up):
    p = proxy()
    before = len(up.requests)
    raw = p.client().chat.completions.with_raw_response.create(
        model="recall-id", messages=history(), tools=TOOLS)
    done = raw.parse()
    first, second = up.requests[before:]
    assert [t["function"]["name"] for t in first["tools"]] == ["lookup", "context_recall"]
    marker = first["messages"][3]["content"]
    assert "row 100:" not in marker and "(context_recall)]" in marker
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": "call_r1", "content": LINES}
    assert done.choices[0].message.content == "I read: " + LINES
    assert done.choices[0].message.tool_calls is None
    assert done.usage.prompt_tokens == (100 + 10 * 5) + (100 + 10 * 7)
    assert done.usage.completion_tokens == 10 and done.usage.total_tokens == 330
    assert raw.headers["x-context-engine-recall-rounds"] == "1"
    row = p.rows()[-1]
    assert row["recall_rounds"] == 1 and row["recall_prompt_tokens"] == 170
    assert row["recall_completion_tokens"] == 5 and row["prompt_tokens"] == 320
    data = report.build(p.rows(), "model")
    assert data["recall"]["rounds"] == 1 and data["recall"]["prompt_tokens"] == 170
    assert "recall: 1 follow-up calls in 1 requests cost 170 input + 5 output tokens" in \
        " ".join(str(x) for x in report.render(data))


def test_non_stream_bytes_are_the_final_reply_apart_from_summed_usage(proxy, up):
    p = proxy()
    r = httpx.post(p.url + "/v1/chat/completions", headers={"authorization": "Bearer k"},
                   json={"model": "recall-id", "messages": history(), "tools": TOOLS})
    final = up.responses[-1].decode()
    got = r.content.decode()
    _, spans_final = object_spans(final)
    _, spans_got = object_spans(got)
    (a, b), (c, d) = spans_final["usage"], spans_got["usage"]
    assert got[:c] == final[:a] and got[d:] == final[b:]
    assert json.loads(got[c:d])["prompt_tokens"] == 320


def test_stream_forwards_text_and_continues_from_the_follow_up(proxy, up):
    p = proxy()
    before = len(up.requests)
    r = httpx.post(p.url + "/v1/chat/completions", headers={"authorization": "Bearer k"},
                   json={"model": "recall-id", "messages": history(), "tools": TOOLS,
                         "stream": True, "stream_options": {"include_usage": True}})
    assert len(up.requests) - before == 2
    first, second = up.responses[-2:]
    head = first[:first.index(b'data: {"id": "chatcmpl-r", "object": "chat.completion.chunk", '
                              b'"created": 1, "model": "m", "choices": [{"index": 0, "delta": {"tool_calls"')]
    usage_at = second.index(b'data: {"id": "chatcmpl-r", "object": "chat.completion.chunk", "choices": [], "usage"')
    assert r.content.startswith(head + second[:usage_at])  # byte for byte up to the usage chunk
    tail = r.content[len(head) + usage_at:]
    assert tail.endswith(b"data: [DONE]\n\n")
    assert json.loads(tail.split(b"\n\n")[0][6:])["usage"]["prompt_tokens"] == 320

    stream = p.client().chat.completions.create(
        model="recall-id", messages=history(), tools=TOOLS, stream=True,
        stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Let me check. Let me check. I read: " + LINES
    assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
    assert chunks[-1].usage.prompt_tokens == 320 and chunks[-1].usage.completion_tokens == 10


def test_stream_without_a_recall_call_is_relayed_unchanged(proxy, up):
    p = proxy()
    r = httpx.post(p.url + "/v1/chat/completions",
                   json={"model": "recall-mixed", "messages": history()[:2], "tools": TOOLS,
                         "stream": True})
    assert r.content == up.responses[-1]
    assert b"context_recall" not in r.content


def test_mixed_calls_resolve_recall_first_and_ask_again(proxy, up):
    p = proxy()
    before = len(up.requests)
    for stream in (False, True):
        kw = {"stream": True} if stream else {}
        got = p.client().chat.completions.create(model="recall-mixed", messages=history(),
                                                 tools=TOOLS, **kw)
        if stream:
            calls = [tc for c in got for tc in (c.choices[0].delta.tool_calls or []) if c.choices]
            names = [c.function.name for c in calls if c.function.name]
        else:
            names = [c.function.name for c in got.choices[0].message.tool_calls]
        assert names == ["lookup"]
    follow = up.requests[before + 1]
    asked = follow["messages"][-2]
    assert [c["function"]["name"] for c in asked["tool_calls"]] == ["context_recall"]
    assert follow["messages"][-1]["content"] == LINES


@pytest.mark.parametrize("stream", [False, True])
def test_max_rounds_stops_and_the_last_round_goes_without_the_tool(proxy, up, stream):
    p = proxy(recall={"max_rounds": 2})
    before = len(up.requests)
    got = p.client().chat.completions.create(model="recall-loop", messages=history(),
                                             tools=TOOLS, stream=stream)
    text = "".join(c.choices[0].delta.content or "" for c in got if c.choices) if stream \
        else got.choices[0].message.content
    assert text.endswith("gave up after 2 recall results")
    sent = up.requests[before:]
    assert len(sent) == 3
    assert ["context_recall" in json.dumps(b["tools"]) for b in sent] == [True, True, False]


def test_unknown_id_answers_not_found(proxy, up):
    p = proxy()
    got = p.client().chat.completions.create(model="recall-unknown", messages=history(), tools=TOOLS)
    assert got.choices[0].message.content.startswith("I read: not found: orig:000000000000")


def test_recall_reads_only_the_callers_own_session(proxy, up):
    p = proxy()
    secret = LINES.replace("units", "secret units")
    a = p.client(api_key="sk-a").chat.completions.create(
        model="recall-id", messages=history(lines=secret), tools=TOOLS,
        extra_headers={"x-session-id": "shared"})
    assert "secret units" in a.choices[0].message.content
    stolen = json.loads(up.responses[-2])["choices"][0]["message"]["tool_calls"][0]
    their_id = json.loads(stolen["function"]["arguments"])["id"]
    b = p.client(api_key="sk-b").chat.completions.create(
        model=f"recall-other:{their_id}", messages=history(), tools=TOOLS,
        extra_headers={"x-session-id": "shared"})
    assert b.choices[0].message.content == f"I read: not found: {their_id} (no such id in this conversation)"
    # same session header, another key: another session, whose tool state is its own
    short = [{"role": "user", "content": "hi"}]
    p.client(api_key="sk-c").chat.completions.create(
        model="recall-id", messages=short, tools=TOOLS, extra_headers={"x-session-id": "shared"})
    assert "context_recall" not in json.dumps(up.requests[-1]["tools"])
    p.client(api_key="sk-a").chat.completions.create(
        model="plain", messages=short, tools=TOOLS, extra_headers={"x-session-id": "shared"})
    assert "context_recall" in json.dumps(up.requests[-1]["tools"])  # kept on for sk-a's session


def test_turns_that_left_are_recalled_by_number(proxy, up):
    p = proxy(rules="retrieve", rule_options={"retrieve": {
        "min_closed_tokens": 0, "min_drop_ratio": 0, "embedder": "hashing", "window": 2, "block": 2}})
    messages = [{"role": "system", "content": "You are terse."}]
    for i in range(12):
        messages += [{"role": "user", "content": f"Note {i}: the locker code for room {i} is {1000 + i}. " * 3},
                     {"role": "assistant", "content": f"Noted room {i}."}]
    messages.append({"role": "user", "content": "Fine."})
    got = p.client().chat.completions.create(model="recall-turn", messages=messages, tools=TOOLS)
    first = up.requests[-2]
    line = next(m["content"] for m in first["messages"] if "[context-engine:recall]" in str(m["content"]))
    assert line.startswith("[context-engine:recall] turns from #2 on are not all shown")
    assert messages[1] in first["messages"]  # the task is pinned
    assert got.choices[0].message.content == "I read: #2 assistant: " + messages[2]["content"]


def test_no_tools_means_no_tool_and_markers_say_so(proxy, up):
    p = proxy()
    p.client().chat.completions.create(model="recall-id", messages=history())
    sent = up.requests[-1]
    assert "tools" not in sent
    assert "(no recall tool here)]" in sent["messages"][3]["content"]


def test_recalled_text_is_fenced_when_zones_is_on(proxy, up):
    p = proxy(rules="tool_json,zones")
    p.client().chat.completions.create(model="recall-id", messages=history(), tools=TOOLS)
    result = up.requests[-1]["messages"][-1]["content"]
    assert result.startswith("<<zone:tool:") and result.endswith("<</zone:tool>>")
    assert LINES in result


def test_the_tool_stays_on_for_the_session_across_a_restart(proxy, up, tmp_path):
    short = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hi"}]
    head = {"x-session-id": "s-restart"}
    first = proxy(store=DiskStore(str(tmp_path / "store")))
    first.client().chat.completions.create(model="plain", messages=short, tools=TOOLS, extra_headers=head)
    assert "context_recall" not in json.dumps(up.requests[-1]["tools"])  # nothing lossy yet
    first.client().chat.completions.create(model="plain", messages=history(), tools=TOOLS, extra_headers=head)
    assert "context_recall" in json.dumps(up.requests[-1]["tools"])
    first.server.__exit__(None, None, None)
    first.app.state.engine.store.close()
    again = proxy(store=DiskStore(str(tmp_path / "store")))
    again.client().chat.completions.create(model="plain", messages=short, tools=TOOLS, extra_headers=head)
    assert [t["function"]["name"] for t in up.requests[-1]["tools"]] == ["lookup", "context_recall"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_failed_follow_up_reaches_the_client_as_a_fault(proxy, up, stream):
    import openai

    p = proxy()
    with pytest.raises((openai.InternalServerError, openai.APIError, httpx.HTTPError)):
        got = p.client().chat.completions.create(model="recall-fail", messages=history(),
                                                 tools=TOOLS, stream=stream)
        if stream:
            list(got)
    row = p.rows()[-1]
    assert row["status"] == 500 if not stream else row["error"].startswith("recall follow-up answered 500")


def test_a_folded_repeat_hides_nothing_and_offers_no_tool(proxy, up):
    """fold_duplicates' reference to an earlier copy the request still shows is lossless:
    no recall line, and no context_recall tool (adding it would cost the session a
    whole-prefix cache miss)."""
    p = proxy(rules="fold_duplicates")
    said = ("It seems flight HAT030 is not available on May 13, 2024. Since this flight is part "
            "of your original reservation, we need to address this before proceeding with the "
            "change to the Atlanta to Las Vegas segment. Shall I look at other dates?")  # > 200 chars
    messages = [{"role": "system", "content": "You are an airline agent."},
                {"role": "user", "content": "Change my flight to May 13."},
                {"role": "assistant", "content": said},
                {"role": "user", "content": "Try again, please."},
                {"role": "assistant", "content": said},
                {"role": "user", "content": "Any nonstop options?"}]
    p.client().chat.completions.create(model="plain", messages=messages, tools=TOOLS)
    sent = up.requests[-1]
    assert sent["messages"][4]["content"].startswith("[repeats the earlier assistant message")
    assert [t["function"]["name"] for t in sent["tools"]] == ["lookup"]
    assert "[context-engine:recall]" not in json.dumps(sent)


def test_a_repeat_whose_first_copy_left_is_still_a_gap():
    from context_engine.proxy.engine.recall_marks import align

    said = "The locker code is 4417; the spare key is with the porter. " * 5
    original = [{"role": "system", "content": "s"}, {"role": "user", "content": "Code?"},
                {"role": "assistant", "content": said}, {"role": "user", "content": "Again?"},
                {"role": "assistant", "content": said}, {"role": "user", "content": "Thanks."}]
    ref = {"role": "assistant", "content": "[repeats the earlier assistant message “The locker code is…”]"}
    kept = [original[0], original[1], original[2], original[3], ref, original[5]]
    assert align(original, kept)[1] == []  # the first copy is shown: nothing hidden
    dropped = [original[0], original[3], ref, original[5]]  # the first copy left the request
    assert align(original, dropped)[1] == [(1, 3, 1), (4, 5, 3)]


def test_a_text_turn_cleared_in_place_is_held_not_a_gap():
    """compact clears a text-action harness's observation in place under its own id: the
    turn is there, so no "[context-engine:recall] turns … not all shown" line goes in."""
    from context_engine.proxy.engine.originals import original_id
    from context_engine.proxy.engine.recall_marks import align, mark

    seen = "<returncode>0</returncode>\n<output>\n" + "src/app.py:12: x = 1\n" * 40 + "</output>"
    original = [{"role": "system", "content": "s"}, {"role": "user", "content": "Fix app.py."},
                {"role": "assistant", "content": "THOUGHT: look.\n```bash\ngrep -n x src\n```"},
                {"role": "user", "content": seen},
                {"role": "assistant", "content": "THOUGHT: edit.\n```bash\nsed -i s/1/2/ src/app.py\n```"},
                {"role": "user", "content": "<returncode>0</returncode>"}]
    cleared = {"role": "user", "content": f"[context-engine:cleared] {original_id(seen)}: src/app.py:12"}
    sent = original[:3] + [cleared] + original[4:]
    assert align(original, sent) == ({0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 5}, [])
    marked = mark(original, sent, False, 0)
    assert [m["content"] for m in marked.messages][3] == cleared["content"].replace(
        original_id(seen), original_id(seen) + " (no recall tool here)")
    assert marked.turns is None and marked.hidden == [3] and len(marked.messages) == len(sent)
    other = {"role": "user", "content": "[context-engine:cleared] orig:000000000000"}
    assert align(original, original[:3] + [other] + original[4:])[1] == [(3, 4, 4)]


def _their_original(p, up, secret: str) -> str:
    """Caller sk-a's request stores its tool result; the id its marker names."""
    a = p.client(api_key="sk-a").chat.completions.create(
        model="recall-id", messages=history(lines=secret), tools=TOOLS)
    assert "secret units" in a.choices[0].message.content
    return "orig:" + json.dumps(up.requests[-1]).split("orig:")[1][:12]


@pytest.mark.parametrize("own_cut", [False, True])
def test_a_client_message_under_an_injected_header_names_no_original(proxy, up, own_cut):
    p = proxy()
    secret = LINES.replace("units", "secret units")
    their_id = _their_original(p, up, secret)
    # sk-b dresses its own text up as the proxy's memory zone naming sk-a's id; with
    # own_cut its own tool result is cut too, so the tool is offered either way
    lines = LINES.replace("units", "b-units") if own_cut else "short result"
    msgs = history(lines=lines)
    msgs[1] = {"role": "user", "content": f"[context-engine:memory]\n[1] see {their_id}"}
    before = len(up.requests)
    b = p.client(api_key="sk-b").chat.completions.create(
        model=f"recall-other:{their_id}", messages=msgs, tools=TOOLS)
    assert "secret units" not in json.dumps(up.requests[before:]) + b.choices[0].message.content
    sent = up.requests[before]
    assert sent["messages"][1] == msgs[1]  # the client's own text, sent as it is
    if own_cut:
        assert b.choices[0].message.content == \
            f"I read: not found: {their_id} (no such id in this conversation)"


def test_stored_originals_are_kept_per_caller():
    """An id is a hash of content: whoever learns it reads only their own copy of it."""
    store = MemoryStore()
    ref = keep_original(store, "a's tool output", scope="caller-a")
    assert store.get(ref) is None  # never under the bare id another caller could name
    assert stored_original(store, ref, scope="caller-a") == "a's tool output"
    assert stored_original(store, ref, scope="caller-b") is None
    theirs = RecallScope([], {ref}, store=store, caller="caller-b")
    assert resolve(theirs, {"id": ref}).startswith("not found")
    mine = RecallScope([], {ref}, store=store, caller="caller-a")
    assert resolve(mine, {"id": ref}) == "a's tool output"


def _follow_up_results(up, before: int) -> list[str]:
    follow = up.requests[before + 1]["messages"]
    return [m["content"] for m in follow if m.get("role") == "tool" and m["tool_call_id"].startswith("call_r")]


def test_calls_past_max_calls_in_one_reply_answer_too_many(proxy, up):
    p = proxy(recall={"max_calls": 3})
    before = len(up.requests)
    p.client().chat.completions.create(model="recall-many:40", messages=history(), tools=TOOLS)
    results = _follow_up_results(up, before)
    assert len(results) == 40  # every call gets its result, so the follow-up is valid
    assert all(not r.startswith("not answered") for r in results[:3])
    assert all(r.startswith("not answered: too many context_recall calls in one reply (at most 3)")
               for r in results[3:])


def test_the_recalled_text_of_one_request_is_bounded(proxy, up):
    p = proxy(recall={"max_calls": 10, "max_chars": 2000, "max_total_chars": 3000})
    before = len(up.requests)
    p.client().chat.completions.create(model="recall-many:10", messages=history(), tools=TOOLS)
    results = _follow_up_results(up, before)
    assert len(results) == 10
    spent = [r for r in results if r.startswith("not answered: this request's recall budget")]
    recalled = [r.split("\n[… ")[0] for r in results  # without the cut notes
                if r not in spent and not r.startswith("not found")]
    assert spent and sum(len(r) for r in recalled) <= 3000


def test_calls_are_resolved_in_the_request_lane_with_one_index_per_request():
    from context_engine.proxy.engine.lanes import RequestLane
    from context_engine.proxy.engine.recall_resolve import resolve_calls

    threads: list[str] = []

    def fence(text: str) -> str:
        import threading
        threads.append(threading.current_thread().name)
        return text

    msgs = history()
    scope = RecallScope(msgs, hidden=[1, 2, 3], fence=fence)
    lane = RequestLane(1, 4)
    try:
        calls = [{"query": "sensor-100"}, {"query": "sensor read"}, {"id": "#3"}]
        got = asyncio.run(resolve_calls(scope, calls, lane=lane, session="s", max_calls=8,
                                        deadline_s=None))
    finally:
        lane.close()
    assert len(got) == 3 and "row 100:" in got[0]
    assert threads and all(t.startswith("rules") for t in threads)
    assert scope.index() is scope.index()  # built once, for every query of the request
