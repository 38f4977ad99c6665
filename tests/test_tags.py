"""Requests tagged with their agent and project folder: the tag prefix, the headers, the
ledger's columns, ``report --by agent|project`` and ``/stats``'s filters. Also: Claude Code's
tool search (deferred tools and ``tool_reference`` blocks) passes through the rules unchanged."""

from __future__ import annotations

import json

import httpx

from context_engine.proxy.edge.tags import decode_project, encode_project, tag_prefix
from context_engine.proxy.reporting.report import build

BODY = {"model": "claude-sonnet-4-5", "max_tokens": 16,
        "messages": [{"role": "user", "content": "Hello there."}]}
PROJECT = "/home/ana/src/café project"


def test_project_names_survive_the_path_segment():
    for folder in (PROJECT, "/", "/a/b", "C:\\work\\x"):
        segment = encode_project(folder)
        assert "/" not in segment and "=" not in segment
        assert decode_project(segment) == folder


def test_tag_prefix_tags_the_row_and_reaches_the_upstream_path(start_proxy, mock):
    proxy = start_proxy()
    r = httpx.post(proxy.url + tag_prefix("claude", PROJECT) + "/v1/messages", json=BODY,
                   headers={"x-api-key": "sk-ant-k"})
    assert r.status_code == 200
    sent = mock.received[-1]
    assert sent.path == "/v1/messages" and sent.headers["x-api-key"] == "sk-ant-k"
    assert not [h for h in sent.headers if h.lower().startswith("x-context-engine")]
    row = proxy.rows()[-1]
    assert (row["agent"], row["project"], row["path"]) == ("claude", PROJECT, "/v1/messages")


def test_tag_headers_tag_the_row_and_stay_here(start_proxy, mock):
    proxy = start_proxy()
    r = httpx.post(proxy.url + "/v1/chat/completions", headers={
        "x-context-engine-agent": "aider", "x-context-engine-project": "/srv/app"},
        json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200
    assert not [h for h in mock.received[-1].headers if h.lower().startswith("x-context-engine")]
    row = proxy.rows()[-1]
    assert (row["agent"], row["project"]) == ("aider", "/srv/app")


def test_a_malformed_tag_prefix_is_not_found(start_proxy, mock):
    proxy = start_proxy()
    before = len(mock.received)
    for path in ("/_tag/claude/v1/messages", "/_tag/bad agent!/" + encode_project("/x") + "/v1/messages",
                 "/_tag/claude/%%%/v1/messages"):
        assert httpx.post(proxy.url + path, json=BODY).status_code == 404, path
    assert len(mock.received) == before


def test_report_and_stats_by_agent_and_project(start_proxy, mock):
    proxy = start_proxy()
    for agent, folder in (("claude", "/p/one"), ("claude", "/p/two"), ("codex", "/p/one")):
        httpx.post(proxy.url + tag_prefix(agent, folder) + "/v1/messages", json=BODY)
    httpx.post(proxy.url + "/v1/messages", json=BODY)  # untagged
    rows = proxy.rows()
    by_agent = {r["key"]: r["requests"] for r in build(rows, "agent")["rows"]}
    assert by_agent == {"claude": 2, "codex": 1, "(untagged)": 1}
    by_project = {r["key"]: r["requests"] for r in build(rows, "project")["rows"]}
    assert by_project == {"/p/one": 2, "/p/two": 1, "(untagged)": 1}
    stats = httpx.get(proxy.url + "/stats", params={"agent": "claude", "project": "/p/one"}).json()
    assert stats["overall"]["requests"] == 1 and stats["sessions"] == 1
    assert {t["key"] for t in httpx.get(proxy.url + "/stats").json()["by_agent"]} == {
        "claude", "codex", "(untagged)"}


SEARCH_TOOLS = [
    {"name": "ToolSearch", "description": "Search deferred tools.",
     "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}},
    {"name": "mcp__db__lookup", "description": "Look up a record.", "defer_loading": True,
     "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}}},
]
REFERENCE = {"type": "tool_reference", "tool_name": "mcp__db__lookup"}


def test_tool_search_blocks_pass_the_rules_unchanged(start_proxy, mock):
    proxy = start_proxy(enabled="compact,fold_duplicates,tool_json,budget")
    long_output = "\n".join(f"line {i}: " + "x" * 60 for i in range(400))
    messages = [
        {"role": "user", "content": "Find record 7, then check the build."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_s", "name": "ToolSearch",
                                           "input": {"query": "lookup"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_s",
                                      "content": [REFERENCE]}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_b", "name": "Bash",
                                           "input": {"command": "make"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_b",
                                      "content": long_output}]},
    ]
    body = json.dumps({**BODY, "messages": messages, "tools": SEARCH_TOOLS}).encode()
    r = httpx.post(proxy.url + "/v1/messages", content=body,
                   headers={"anthropic-beta": "advanced-tool-use-2025-11-20"})
    assert r.status_code == 200
    got = mock.received[-1]
    assert got.headers["anthropic-beta"] == "advanced-tool-use-2025-11-20"
    sent = got.json()
    assert sent["tools"][:2] == SEARCH_TOOLS  # recall's own tool may follow them
    assert [t["name"] for t in sent["tools"][2:]] in ([], ["context_recall"])
    assert sent["messages"][2]["content"][0]["content"] == [REFERENCE]
    for item in (*SEARCH_TOOLS, REFERENCE):
        assert json.dumps(item).encode() in got.body
    assert proxy.rows()[-1]["tokens_sent"] < proxy.rows()[-1]["tokens_original"]  # the rules ran


def test_claude_codes_request_over_the_budget_reaches_the_upstream_as_sent(start_proxy, mock):
    """The agent tag reaches the rules: a Claude Code request whose original is over the
    budget goes out with its messages as sent (the provider's "too long" is its signal to
    compact); untagged, the same request is cut to fit."""
    big = "\n".join(str(n) for n in range(100_000, 103_000))
    body = {"model": "claude-sonnet-4-5", "max_tokens": 16, "messages": [
        {"role": "user", "content": "Count, then list the files."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash",
                                           "input": {"command": "seq 100000 103000"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": big}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_2", "name": "Bash",
                                           "input": {"command": "ls"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "a.py"}]}]}
    proxy = start_proxy(enabled="tool_json,budget", rule_options={
        "tool_json": {"max_chars": 2000}, "budget": {"max_input_tokens": 5000}})
    raw = json.dumps(body).encode()
    for prefix, as_sent in ((tag_prefix("claude", PROJECT), True), ("", False)):
        r = httpx.post(proxy.url + prefix + "/v1/messages", content=raw,
                       headers={"x-api-key": "sk-ant-k", "content-type": "application/json"})
        assert r.status_code == 200
        assert (mock.received[-1].body == raw) is as_sent
    rows = proxy.rows()
    assert [r["tokens_sent"] == r["tokens_original"] for r in rows] == [True, False]


def test_an_encoded_tag_segment_never_turns_a_conversation_into_a_passthrough(start_proxy, mock):
    """Whatever the encoding of the prefix (a ``%2F`` in the project or agent segment, an
    encoded segment separator), a request either reaches a conversation route as one (rules,
    a ledger row) or is refused: the upstream never sees a conversation call that the
    ledger does not."""
    proxy = start_proxy()
    chat = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Hello there."}]}
    project = encode_project(PROJECT)
    tricks = [f"/_tag/codex/{project}%2Fv1%2Fmodels/chat/completions",
              f"/_tag/codex/{project}%2fv1%2fmodels/chat/completions",
              f"/_tag/codex%2F{project}/v1%2Fmodels/chat/completions",
              f"/_tag/codex/{project}%2Fx/v1/chat/completions",
              f"/_tag%2Fcodex/{project}/v1/models/chat/completions",
              f"/_tag/co%64ex/{project}/v1/chat/completions",
              f"/_tag/codex/{project[:-1]}%{ord(project[-1]):02X}/v1/chat/completions"]
    for path in tricks:
        before, rows_before = len(mock.received), len(proxy.rows())
        r = httpx.post(proxy.url + path, json=chat, headers={"authorization": "Bearer sk-test"})
        reached = [x for x in mock.received[before:] if x.path.endswith("/chat/completions")]
        rows = proxy.rows()[rows_before:]
        assert len(reached) == len(rows), (path, r.status_code, [x.path for x in reached])
        if r.status_code == 200:
            assert rows and rows[-1]["path"].endswith("/chat/completions"), path
        else:
            assert 400 <= r.status_code < 500, (path, r.status_code)
