"""Compaction epochs through the real server on all three APIs: an agent session past the
trigger goes out with old results cleared in place, each placeholder naming its own
``orig:`` id, the task kept; the model's ``context_recall`` of that id is answered inside
the proxy with the original; the ledger records the session's kind and its epoch."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import pytest

from tests.fakes.recall_upstream import RecallUpstream
from tests.fakes.recall_upstream_apis import RecallApisUpstream
from tests.test_recall import recall_proxies

TASK = "Fix the bug in parser.py: parse('a,b') drops the second field."
STEPS = 24
COMPACT = {"trigger_tokens": 300, "clear_at_least": 50, "keep_recent": 1, "keep_prose": 1,
           "min_item_tokens": 10, "min_horizon": 100, "gist_chars": 0}


def output(i: int) -> str:
    return "\n".join(f"src/m{i}.py:{n}: value_{i}_{n} = compute({n})" for n in range(12))


def chat_messages() -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                  {"role": "user", "content": TASK}]
    for i in range(STEPS):
        msgs += [{"role": "assistant", "content": None, "tool_calls": [{
                      "id": f"call_{i}", "type": "function",
                      "function": {"name": "bash", "arguments": json.dumps({"cmd": f"grep -n x m{i}"})}}]},
                 {"role": "tool", "tool_call_id": f"call_{i}", "content": output(i)}]
    return msgs + [{"role": "user", "content": "What did the first search find?"}]


def responses_input() -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                   {"role": "user", "content": TASK}]
    for i in range(STEPS):
        items += [{"type": "function_call", "call_id": f"call_{i}", "name": "bash",
                   "arguments": json.dumps({"cmd": f"grep -n x m{i}"})},
                  {"type": "function_call_output", "call_id": f"call_{i}", "output": output(i)}]
    return items + [{"role": "user", "content": "What did the first search find?"}]


def anthropic_messages() -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    for i in range(STEPS):
        msgs += [{"role": "assistant", "content": [{"type": "tool_use", "id": f"toolu_{i}", "name": "bash",
                                                     "input": {"cmd": f"grep -n x m{i}"}}]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i}",
                                               "content": output(i)}]
                  + ([{"type": "text", "text": "What did the first search find?"}] if i == STEPS - 1 else [])}]
    return msgs


C_TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
R_TOOLS = [{"type": "function", "name": "bash", "parameters": {"type": "object"}}]
A_TOOLS = [{"name": "bash", "input_schema": {"type": "object"}}]


@pytest.fixture(scope="module")
def ups():
    with RecallUpstream() as chat, RecallApisUpstream() as others:
        yield {"chat": chat, "responses": others, "anthropic": others}


def _reply(p: Any, api: str) -> str:
    if api == "chat":
        got = p.client().chat.completions.create(model="recall-id", messages=chat_messages(), tools=C_TOOLS)
        return str(got.choices[0].message.content)
    if api == "responses":
        return str(p.client().responses.create(model="recall-id", input=responses_input(),
                                               tools=R_TOOLS, store=False).output_text)
    client = anthropic.Anthropic(base_url=p.url, api_key="sk-ant-test", max_retries=0)
    kw: dict[str, Any] = {"messages": anthropic_messages(), "tools": A_TOOLS}
    msg = client.messages.create(model="recall-id", system="You are a coding agent.",
                                 max_tokens=64, **kw)
    return "".join(b.text for b in msg.content if b.type == "text")


@pytest.mark.parametrize("api", ["chat", "responses", "anthropic"])
def test_an_epoch_clears_in_place_and_recall_brings_the_original_back(ups, tmp_path, api):
    up = ups[api]
    with recall_proxies(up.url, tmp_path) as start:
        p = start(rules="compact", rule_options={"compact": COMPACT})
        before = len(up.requests)
        text = _reply(p, api)
        row = p.rows()[-1]
    first = json.dumps(up.requests[before])
    assert TASK in first  # pinned
    assert "[context-engine:cleared] orig:" in first and "(context_recall)" in first
    assert output(0) not in first and output(STEPS - 1).replace("\n", "\\n") in first  # the last result whole
    assert text == "I read: " + output(0)  # the model recalled the first cleared result by its id
    context = json.loads(row["context"])
    assert context["kind"] == "agent"
    assert context["compaction"]["epoch"] == 1 and context["compaction"]["fired"]
    assert context["compaction"]["assumed"]  # "recall-id" is no model litellm prices


def test_a_chat_is_not_compacted_and_says_so_in_the_ledger(ups, tmp_path):
    up = ups["chat"]
    messages = [{"role": "system", "content": "Be brief."}] + [
        {"role": "user" if i % 2 == 0 else "assistant", "content": output(i)} for i in range(9)]
    with recall_proxies(up.url, tmp_path) as start:
        p = start(rules="compact", rule_options={"compact": COMPACT})
        p.client().chat.completions.create(model="plain", messages=messages)
        row = p.rows()[-1]
    assert json.dumps(up.requests[-1]["messages"]) == json.dumps(messages)
    context = json.loads(row["context"])
    assert context["kind"] == "chat" and "compaction" not in context


def _marked_blocks(body: dict[str, Any]) -> list[tuple[str, Any]]:
    """(where, what) of every block carrying a cache_control, in order."""
    out = [("system", b.get("text")) for b in body.get("system") or [] if "cache_control" in b]
    for i, m in enumerate(body["messages"]):
        for b in m["content"] if isinstance(m["content"], list) else []:
            if "cache_control" in b:
                out.append((f"{i}:{b['type']}", b.get("text") or b.get("content") or b.get("id")))
    return out


def _send_marked(up: Any, p: Any, messages: list[dict[str, Any]], marks: int = 2) -> dict[str, Any]:
    """A request marked as Claude Code marks it (the system prompt and the newest block),
    plus ``marks - 2`` more on the first tool results; the body the upstream got."""
    messages = json.loads(json.dumps(messages))
    messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    for m in [m for m in messages if m["role"] == "user" and isinstance(m["content"], list)][:marks - 2]:
        m["content"][0]["cache_control"] = {"type": "ephemeral"}
    system = [{"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}]
    before = len(up.requests)
    client = anthropic.Anthropic(base_url=p.url, api_key="sk-ant-test", max_retries=0)
    kw: dict[str, Any] = {"system": system, "messages": messages, "tools": A_TOOLS}
    client.messages.create(model="plain", max_tokens=64, **kw)
    return up.requests[before]


def test_a_breakpoint_marks_where_the_prefix_no_later_epoch_changes_ends(ups, tmp_path):
    """A client with two breakpoints gets a third where the stable prefix ends, so the
    next epoch re-writes only what it changes; before the first epoch that is the task,
    after it the last cleared result before the first one still whole."""
    up = ups["anthropic"]
    with recall_proxies(up.url, tmp_path) as start:
        p = start(rules="compact", rule_options={"compact": COMPACT})
        first = _send_marked(up, p, anthropic_messages())
        grown = anthropic_messages()
        grown[-1]["content"] = grown[-1]["content"][:1]  # the question answered; one step more
        grown += [{"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_x", "name": "bash",
                                                     "input": {"cmd": "grep -n y m0"}}]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x",
                                                "content": output(99)}]}]
        second = _send_marked(up, p, grown)
        four = _send_marked(up, p, grown, marks=4)
        off = start(rules="compact", rule_options={"compact": {**COMPACT, "mark_stable": False}})
        plain = _send_marked(up, off, anthropic_messages())
    marks = _marked_blocks(first)
    assert len(marks) == 3 and marks[0][0] == "system" and marks[1] == ("0:text", TASK)
    assert marks[2][0] == f"{len(first['messages']) - 1}:text"  # the newest block, as the client set it
    marks = _marked_blocks(second)
    assert len(marks) == 3 and marks[1][0].endswith(":tool_result")
    at = int(marks[1][0].split(":")[0])
    assert "[context-engine:cleared]" in json.dumps(second["messages"][at])  # cleared: it stays so
    later = json.dumps(second["messages"][at + 1:])
    assert output(STEPS - 1).replace("\n", "\\n") in later  # the first result still whole comes after it
    assert len(_marked_blocks(four)) == 4  # never past the provider's 4
    assert len(_marked_blocks(plain)) == 2  # mark_stable: false
