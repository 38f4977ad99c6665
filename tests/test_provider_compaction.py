"""A provider's own compaction through the real server: OpenAI's encrypted ``compaction``
item (Responses) and Anthropic's ``compaction`` block (Messages, ``compact-*`` beta)
pass byte for byte in place; the rules (``tool_json``, ``compact``, ``budget``) act only
after the last one, never on what precedes it; the ledger row says the request carried
one. Shapes as the SDKs type them (``ResponseCompactionItem``, ``BetaCompactionBlock``)."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import pytest

from context_engine.proxy.dialects.jsonspan import array_spans, object_spans, value_start

TASK = "Fix the bug in parser.py: parse('a,b') drops the second field."
COMPACT = {"trigger_tokens": 300, "clear_at_least": 50, "keep_recent": 1, "keep_prose": 1,
           "min_item_tokens": 10, "min_horizon": 100, "gist_chars": 0}
RULES = {"tool_json": {"max_chars": 200}, "compact": COMPACT, "budget": {"max_input_tokens": 900}}
# OpenAI's item from /v1/responses/compact (ResponseCompactionItem), Anthropic's block
# (BetaCompactionBlockParam), as the client sends them back
OPENAI_ITEM = {"id": "cmp_68c1f0a9", "type": "compaction", "created_by": "openai",
               "encrypted_content": "gAAAAABoZ2NvbXBhY3Rpb24tc3VtbWFyeS1lbmNyeXB0ZWQ" * 8 + "=="}
ANTHROPIC_BLOCK = {"type": "compaction", "content": "Summary: the parser drops the second field; "
                   "m0..m5 searched.", "signature": "EqQBCkYIBxgCKkC" + "x" * 40}


def output(i: int) -> str:
    return "\n".join(f"src/m{i}.py:{n}: value_{i}_{n} = compute({n}) # " + "pad " * 6 for n in range(24))


def responses_body(compaction: bool = True) -> dict[str, Any]:
    items: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    for i in range(6):
        items += [{"type": "function_call", "call_id": f"call_{i}", "name": "bash",
                   "arguments": json.dumps({"cmd": f"grep -n x m{i}"})},
                  {"type": "function_call_output", "call_id": f"call_{i}", "output": output(i)}]
    items += [OPENAI_ITEM] if compaction else []
    for i in range(6, 9):
        items += [{"type": "function_call", "call_id": f"call_{i}", "name": "bash",
                   "arguments": json.dumps({"cmd": f"grep -n x m{i}"})},
                  {"type": "function_call_output", "call_id": f"call_{i}", "output": output(i)}]
    items.append({"role": "user", "content": "What did the searches find?"})
    return {"model": "gpt-4.1", "instructions": "You are a coding agent.", "input": items,
            "tools": [{"type": "function", "name": "bash", "parameters": {"type": "object"}}],
            "context_management": [{"type": "compaction", "compact_threshold": 200000}], "store": False}


def anthropic_body(compaction: bool = True) -> dict[str, Any]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    for i in range(9):
        head = [ANTHROPIC_BLOCK] if compaction and i == 6 else []
        msgs += [{"role": "assistant", "content": head + [
                     {"type": "tool_use", "id": f"toolu_{i}", "name": "bash", "input": {"cmd": f"grep -n x m{i}"}}]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i}",
                                               "content": output(i)}]}]
    msgs[-1]["content"].append({"type": "text", "text": "What did the searches find?"})
    return {"model": "claude-sonnet-4-5", "max_tokens": 64, "system": "You are a coding agent.",
            "messages": msgs, "tools": [{"name": "bash", "input_schema": {"type": "object"}}],
            "context_management": {"edits": [{"type": "compact_20260112"}]}}


API = {"responses": ("/v1/responses", responses_body, "input", {"authorization": "Bearer sk-test"}),
       "anthropic": ("/v1/messages", anthropic_body, "messages",
                     {"x-api-key": "sk-ant-test", "anthropic-beta": "compact-2026-01-12"})}


def _send(proxy: Any, mock: Any, api: str, compaction: bool = True) -> tuple[str, str]:
    path, make, _, headers = API[api]
    raw = json.dumps(make(compaction), indent=1)
    r = httpx.post(proxy.url + path, content=raw.encode(), headers=headers, timeout=60)
    assert r.status_code == 200, r.text
    return raw, mock.received[-1].body.decode()


def _holder_end(text: str, api: str) -> int:
    """Where the item holding the compaction (OpenAI: the item; Anthropic: its message)
    ends in the request's text."""
    key = API[api][2]
    _, spans = object_spans(text)
    elements = array_spans(text, spans[key][0])
    found = [e for b, e in elements if '"compaction"' in text[b:e]]
    return found[-1]


@pytest.mark.parametrize("api", ["responses", "anthropic"])
def test_without_rules_the_compaction_goes_out_byte_for_byte(start_proxy, mock, api):
    proxy = start_proxy()
    raw, sent = _send(proxy, mock, api)
    assert sent == raw
    (row,) = proxy.rows()
    mark = json.loads(row["context"])["provider_compaction"]
    assert mark["head_messages"] > 0 and mark["head_tokens"] > 0
    assert row["tokens_original"] == row["tokens_sent"]


@pytest.mark.parametrize("api", ["responses", "anthropic"])
def test_the_rules_act_only_after_the_last_provider_compaction(start_proxy, mock, api):
    proxy = start_proxy(enabled="tool_json,compact,budget", rule_options=RULES)
    raw, sent = _send(proxy, mock, api)
    end = _holder_end(raw, api)
    assert sent[:end] == raw[:end]  # everything up to the compaction: the client's bytes
    assert sent != raw and "orig:" in sent[end:]  # the rules did act after it
    (row,) = proxy.rows()
    context = json.loads(row["context"])
    assert context["provider_compaction"]["head_tokens"] > 0
    assert row["tokens_original"] > row["tokens_sent"]
    assert row["tokens_original"] - row["tokens_sent"] < row["tokens_original"] - context[
        "provider_compaction"]["head_tokens"]  # nothing of the head was saved


@pytest.mark.parametrize("api", ["responses", "anthropic"])
def test_without_a_compaction_the_same_rules_do_touch_the_early_turns(start_proxy, mock, api):
    """The control: the rules above would have changed the early turns (the test above
    can fail)."""
    proxy = start_proxy(enabled="tool_json,compact,budget", rule_options=RULES)
    raw, sent = _send(proxy, mock, api, compaction=False)
    first = raw.index(json.dumps(output(0))[:40])
    assert json.dumps(output(0))[:40] not in sent[:first + 200]
    assert "provider_compaction" not in json.loads(proxy.rows()[-1]["context"])


def test_anthropic_sdk_with_the_compaction_beta(start_proxy, mock):
    proxy = start_proxy(enabled="tool_json", rule_options=RULES)
    client = anthropic.Anthropic(base_url=proxy.url, api_key="sk-ant-test", max_retries=0)
    body = anthropic_body()
    msg = client.beta.messages.create(
        model=body["model"], max_tokens=64, system=body["system"], messages=body["messages"],
        tools=body["tools"], betas=["compact-2026-01-12"], context_management=body["context_management"])
    assert msg.content
    got = mock.received[-1]
    assert "compact-2026-01-12" in got.headers["anthropic-beta"]
    sent = got.json()
    assert sent["messages"][:14] == body["messages"][:14]  # through the compaction's message
    assert sent["messages"][13]["content"][0] == ANTHROPIC_BLOCK
    text = got.body.decode()
    start = value_start(text, 0, "messages")
    assert json.dumps(ANTHROPIC_BLOCK, separators=(",", ":")) in text[start:] or \
        json.dumps(ANTHROPIC_BLOCK) in text[start:]
    assert "orig:" in json.dumps(sent["messages"][14:])


def test_openai_sdk_with_a_compaction_item(start_proxy, mock):
    proxy = start_proxy(enabled="tool_json", rule_options=RULES)
    body = responses_body()
    r = proxy.client().responses.create(model=body["model"], instructions=body["instructions"],
                                        input=body["input"], tools=body["tools"], store=False)
    assert r.output
    sent = mock.received[-1].json()["input"]
    at = body["input"].index(OPENAI_ITEM)
    assert sent[:at + 1] == body["input"][:at + 1] and sent[at] == OPENAI_ITEM
    assert "orig:" in json.dumps(sent[at + 1:])
