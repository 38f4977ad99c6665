"""Golden cases per adapter: parse → neutral → splice gives the client's exact bytes when
nothing changed; after any rewrite the invariants accept, opaque items keep their exact
bytes and order and the request stays valid for its API."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from context_engine.proxy.dialects.jsonspan import array_spans, object_spans
from context_engine.proxy.dialects.registry import BY_NAME
from context_engine.proxy.engine.invariants import rewrite_problems
from context_engine.proxy.engine.opaque import OPAQUE, SRC
from tests.golden_cases import wire, wire_files

GOLDEN = wire_files()


def _adapter(path: Path):
    return BY_NAME[path.name.split("_")[0]]


def _opaque_texts(path: Path) -> list[str]:
    """The exact text of every opaque item/block of a golden request, in order."""
    text = path.read_text()
    data, spans = object_spans(text)
    out = []
    if path.name.startswith("responses") and isinstance(data.get("input"), list):
        for item, (b, e) in zip(data["input"], array_spans(text, spans["input"][0])):
            if item.get("type") not in (None, "message", "function_call", "function_call_output",
                                        "custom_tool_call", "custom_tool_call_output"):
                out.append(text[b:e])
    if path.name.startswith("anthropic"):
        for m, (b, e) in zip(data["messages"], array_spans(text, spans["messages"][0])):
            if isinstance(m["content"], list):
                inner = object_spans(text[b:e])[1]["content"][0] + b
                for blk, (bb, be) in zip(m["content"], array_spans(text, inner)):
                    if blk["type"] not in ("text", "image", "document", "tool_use", "tool_result"):
                        out.append(text[bb:be])
    if path.name.startswith("gemini"):
        for c, (b, e) in zip(data["contents"], array_spans(text, spans["contents"][0])):
            inner = object_spans(text[b:e])[1]["parts"][0] + b
            for part, (pb, pe) in zip(c["parts"], array_spans(text, inner)):
                if set(part) != {"text"} and "functionCall" not in part and "functionResponse" not in part:
                    out.append(text[pb:pe])
    return out


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
def test_unchanged_neutral_splices_to_the_exact_bytes(path):
    raw = path.read_bytes()
    parsed = _adapter(path).parse(raw)
    assert parsed.splice([dict(m) for m in parsed.chat["messages"]]) == raw


def test_golden_cases_hold_every_opaque_kind():
    kinds = set()
    for path in GOLDEN:
        kinds |= {json.loads(t).get("type") or min(json.loads(t)) for t in _opaque_texts(path)}
    assert {"reasoning", "compaction", "item_reference", "thinking", "redacted_thinking",
            "server_tool_use", "web_search_tool_result", "future_item_kind", "mystery_block",
            "inlineData", "executableCode", "codeExecutionResult", "text"} <= kinds


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
def test_every_accepted_drop_keeps_opaque_bytes_and_validity(path):
    raw = path.read_bytes()
    opaque = _opaque_texts(path)
    parsed = _adapter(path).parse(raw)
    msgs = parsed.chat["messages"]
    accepted = 0
    for n in range(1, 5):
        for drop in itertools.combinations(range(len(msgs)), n):
            new = [m for i, m in enumerate(msgs) if i not in drop]
            if rewrite_problems(msgs, new):
                continue
            try:
                out = parsed.splice(new)
            except ValueError:  # the adapter refused a shape its API would reject
                continue
            accepted += 1
            text = out.decode()
            json.loads(text)
            positions = [text.find(t) for t in opaque]
            assert -1 not in positions and positions == sorted(positions), drop
            if path.name.startswith("anthropic"):
                roles = [m["role"] for m in json.loads(text)["messages"]]
                assert roles[0] == "user" and all(a != b for a, b in zip(roles, roles[1:]))
    if path.stem == "responses_codex":
        # it has whole exchanges a rule may drop; in the other fixtures every drop would put
        # two user turns together or lose an opaque item's turn, which the invariants refuse
        assert accepted


def test_opaque_invariant_refuses_drops_and_changes():
    parsed = BY_NAME["responses"].parse(wire("responses_codex.json"))
    msgs = parsed.chat["messages"]
    holder = next(i for i, m in enumerate(msgs) if m.get(OPAQUE))
    assert any("opaque" in p for p in rewrite_problems(msgs, msgs[:holder] + msgs[holder + 2:]))
    changed = {**msgs[holder], OPAQUE: [{**msgs[holder][OPAQUE][0], "encrypted_content": "x"}]}
    assert rewrite_problems(msgs, msgs[:holder] + [changed] + msgs[holder + 1:])
    last = max(i for i, m in enumerate(msgs) if m.get(OPAQUE))
    after = msgs[last + 1]
    assert after["role"] == "tool" and any("after the last opaque" in p for p in rewrite_problems(
        msgs, msgs[:last + 1] + msgs[last + 2:]))
    assert not rewrite_problems(msgs, [dict(m) for m in msgs])


def test_changed_items_keep_their_other_keys():
    parsed = BY_NAME["anthropic"].parse(wire("anthropic_claude_code.json"))
    msgs = parsed.chat["messages"]
    i = next(n for n, m in enumerate(msgs) if m.get("tool_call_id") == "toolu_02")
    assert msgs[i]["content"] == "9"  # one plain text block reads as its string
    new = msgs[:i] + [{**msgs[i], "content": "nine"}] + msgs[i + 1:]
    block = json.loads(parsed.splice(new))["messages"][-1]["content"][0]
    assert block == {"type": "tool_result", "tool_use_id": "toolu_02",
                     "content": [{"type": "text", "text": "nine"}], "is_error": True}
    r = BY_NAME["responses"].parse(wire("responses_items.json"))
    rm = r.chat["messages"]
    j = next(n for n, m in enumerate(rm) if m["role"] == "tool")
    out = json.loads(r.splice(rm[:j] + [{**rm[j], "content": "Done."}] + rm[j + 1:]))
    assert {"type": "custom_tool_call_output", "call_id": "ct_1", "output": "Done."} in out["input"]


def test_rule_messages_without_a_source_are_written_in_each_format():
    note = {"role": "user", "content": "[context-engine:memory] earlier: the cat is called Tom"}
    for name, path in [("responses", "responses_string.json"), ("anthropic", "anthropic_blocks.json"),
                       ("gemini", "gemini_cli.json")]:
        parsed = BY_NAME[name].parse(wire(path))
        msgs = parsed.chat["messages"]
        out = json.loads(parsed.splice(msgs[:-1] + [note] + msgs[-1:]))
        assert "the cat is called Tom" in json.dumps(out)
        assert SRC not in json.dumps(out) and OPAQUE not in json.dumps(out)


def test_anthropic_refuses_a_tool_result_without_its_tool_use():
    parsed = BY_NAME["anthropic"].parse(wire("anthropic_claude_code.json"))
    msgs = parsed.chat["messages"]
    calls = next(i for i, m in enumerate(msgs) if m.get("tool_calls"))
    stripped = {k: v for k, v in msgs[calls].items() if k != "tool_calls"}
    with pytest.raises(ValueError, match="tool_result"):
        parsed.splice(msgs[:calls] + [stripped] + msgs[calls + 1:])


def test_responses_turns_split_at_each_assistant_message():
    body = {"model": "m", "input": [
        {"role": "user", "content": "hi"},
        {"type": "reasoning", "id": "r1", "summary": [], "encrypted_content": "E1"},
        {"role": "assistant", "content": "one"},
        {"type": "reasoning", "id": "r2", "summary": [], "encrypted_content": "E2"},
        {"role": "assistant", "content": "two"},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "ok"},
        {"role": "user", "content": "bye"}]}
    msgs = BY_NAME["responses"].parse(json.dumps(body).encode()).chat["messages"]
    assert [(m["role"], m.get("content"), [o["id"] for o in m.get(OPAQUE, [])]) for m in msgs] == [
        ("user", "hi", []), ("assistant", "one", ["r1"]), ("assistant", "two", ["r2"]),
        ("tool", "ok", []), ("user", "bye", [])]
    assert msgs[2]["tool_calls"][0]["id"] == "c"


def test_anthropic_keeps_the_clients_own_same_role_neighbours():
    body = {"model": "m", "max_tokens": 5, "messages": [
        {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
        {"role": "assistant", "content": "c"}, {"role": "user", "content": "d"},
        {"role": "assistant", "content": "e"}, {"role": "user", "content": "f"}]}
    parsed = BY_NAME["anthropic"].parse(json.dumps(body).encode())
    msgs = parsed.chat["messages"]
    out = json.loads(parsed.splice(msgs[:4] + msgs[5:]))["messages"]  # drop "e": d and f merge
    assert [m["role"] for m in out] == ["user", "assistant", "assistant", "user"]
    assert out[3]["content"] == [{"type": "text", "text": "d"}, {"type": "text", "text": "f"}]


def test_anthropic_splice_merges_same_role_neighbours():
    """A neutral form with two user turns side by side (no rule may produce it, but the
    adapter must still send Anthropic a valid request) goes out merged."""
    raw = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": [
        {"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"},
        {"role": "user", "content": [{"type": "text", "text": "And 3+3?",
                                      "cache_control": {"type": "ephemeral"}}]}]}).encode()
    parsed = BY_NAME["anthropic"].parse(raw)
    msgs = parsed.chat["messages"]
    sent = json.loads(parsed.splice([m for m in msgs if m.get("role") != "assistant"]))
    assert [m["role"] for m in sent["messages"]] == ["user"]
    assert "What is 2+2?" in json.dumps(sent) and '"cache_control"' in json.dumps(sent)


def test_anthropic_cut_that_starts_on_an_assistant_turn_gets_a_user_turn_in_front():
    """Retrieve may cut the oldest turns up to an assistant message: chat-completions
    accepts that, Anthropic wants a user message first."""
    raw = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 8, "system": "Be brief.", "messages": [
        {"role": "user", "content": "Fix the bug."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "sh", "input": {"c": "ls"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.py"}]},
        {"role": "assistant", "content": "Found it."},
        {"role": "user", "content": "Go on."}]}).encode()
    parsed = BY_NAME["anthropic"].parse(raw)
    msgs = parsed.chat["messages"]
    kept = [m for m in msgs if m.get(SRC) not in (0, 1, 2)]
    sent = json.loads(parsed.splice(kept))["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[0]["content"] == [{"type": "text", "text": "(earlier turns left out)"}]
    assert sent[1:] == json.loads(raw)["messages"][3:]


def test_one_plain_text_block_reads_as_a_string_and_goes_back_as_a_block():
    """Rules handle string content as chat clients send it; a block with other keys
    (cache_control) stays a block; a changed string is written in the client's form."""
    raw = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 8,
                      "system": [{"type": "text", "text": "Be brief."}], "messages": [
        {"role": "user", "content": [{"type": "text", "text": "What is 2+2?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "4"}]},
        {"role": "user", "content": [{"type": "text", "text": "And 3+3?",
                                      "cache_control": {"type": "ephemeral"}}]}]}).encode()
    parsed = BY_NAME["anthropic"].parse(raw)
    msgs = parsed.chat["messages"]
    assert [m["content"] for m in msgs[:3]] == ["Be brief.", "What is 2+2?", "4"]
    assert isinstance(msgs[3]["content"], list)
    sent = json.loads(parsed.splice([msgs[0], msgs[1], {**msgs[2], "content": "four"}, msgs[3]]))
    assert sent["messages"][1]["content"] == [{"type": "text", "text": "four"}]
    raw = json.dumps({"model": "gpt-4o", "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hello"}]},
        {"type": "message", "role": "user", "content": "Bye"}]}).encode()
    parsed = BY_NAME["responses"].parse(raw)
    msgs = parsed.chat["messages"]
    assert [m["content"] for m in msgs] == ["Hi", "Hello", "Bye"]
    sent = json.loads(parsed.splice([{**msgs[0], "content": "Hey"}, *msgs[1:]]))
    assert sent["input"][0]["content"] == [{"type": "input_text", "text": "Hey"}]
    assert parsed.splice([dict(m) for m in msgs]) == raw


@pytest.mark.parametrize("api", ["anthropic", "responses"])
def test_a_message_sent_empty_stays_when_a_rule_changes_another(api):
    empty: dict[str, Any] = {"role": "user", "content": []}
    msgs: list[dict[str, Any]] = [empty, {"role": "assistant", "content": "old"}, {"role": "user", "content": "x"}]
    body = {"model": "m", "max_tokens": 5, "messages": msgs} if api == "anthropic" else {
        "model": "m", "input": [{"type": "message", **m} for m in msgs]}
    raw = json.dumps(body).encode()
    parsed = BY_NAME[api].parse(raw)
    neutral = [dict(m) for m in parsed.chat["messages"]]
    neutral[1]["content"] = "…"
    sent = json.loads(parsed.splice(neutral))
    items = sent["messages" if api == "anthropic" else "input"]
    assert len(items) == 3 and items[0]["content"] == [] and "…" in json.dumps(items[1], ensure_ascii=False)


def test_gemini_results_answer_their_calls_and_keep_their_form():
    """Calls without an id get one; each response answers the oldest open call of its
    name; a rewritten response keeps its one string key (else goes back as an object)."""
    parsed = BY_NAME["gemini"].parse(wire("gemini_cli.json"), "/v1beta/models/gemini-2.5-pro:generateContent")
    assert parsed.chat["model"] == "gemini-2.5-pro" and not parsed.stream
    msgs = parsed.chat["messages"]
    tools = [m for m in msgs if m["role"] == "tool"]
    assert [t["tool_call_id"] for t in tools] == ["call-1", "gemini-3-0", "gemini-3-1"]
    new = [{**m, "content": "[cleared]"} if m.get("role") == "tool" else m for m in msgs]
    sent = json.loads(parsed.splice(new))
    responses = [p["functionResponse"] for c in sent["contents"] for p in c["parts"] if "functionResponse" in p]
    assert [r["response"] for r in responses] == [{"output": "[cleared]"}, {"output": "[cleared]"},
                                                  {"output": "[cleared]"}]
    assert responses[0]["id"] == "call-1" and "id" not in responses[1]
    calls = [p for c in sent["contents"] for p in c["parts"] if "functionCall" in p]
    assert calls == [p for c in json.loads(wire("gemini_cli.json"))["contents"] for p in c["parts"]
                     if "functionCall" in p]  # the calls unchanged, ids never added
    assert {k: v for k, v in sent.items() if k != "contents"} == {
        k: v for k, v in json.loads(wire("gemini_cli.json")).items() if k != "contents"}
