"""What an epoch leaves whole and how it clears a turn's calls: a result on a file the
agent works on now stays whole (``keep_related``); a cleared turn's long tool inputs keep
their first line and an ``orig:`` id that redeems them (``input_chars``)."""

from __future__ import annotations

import json
from typing import Any

from context_engine.proxy.dialects.registry import BY_NAME
from context_engine.proxy.engine.originals import REFERENCE, stored_original
from context_engine.proxy.store.stores import MemoryStore
from context_engine.rules.compact.inputs import shorten_call
from context_engine.rules.compact.placeholder import CLEARED
from context_engine.rules.compact.related import command_of, files, related
from tests.harness import assert_valid_rewrite
from tests.rules.test_compact import TASK, apply, output, requests, rule

SCRIPT = "\n".join(["cat <<'EOF' > test_fix.py", "from parser import parse", "",
                    *[f"assert parse('a,b,{n}') == ['a', 'b', '{n}']" for n in range(30)], "EOF"])


def call(i: int, command: str) -> dict[str, Any]:
    return {"id": f"call_{i}", "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": command})}}


def session(commands: list[str], thought: str = "") -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                  {"role": "user", "content": TASK}]
    for i, command in enumerate(commands):
        msgs.append({"role": "assistant", "content": f"THOUGHT: step {i}. {thought}",
                     "tool_calls": [call(i, command)]})
        msgs.append({"role": "tool", "tool_call_id": f"call_{i}", "content": output(i)})
    return msgs


def last_epoch(r: Any, msgs: list[dict[str, Any]]) -> Any:
    out = None
    for req in requests(msgs):
        out = apply(r, req)
    assert out is not None and out.compaction.epoch >= 1
    return out


def test_files_are_named_as_commands_write_them() -> None:
    assert files("nl -ba src/parser.py | sed -n '10,20p' && cat tox.ini") == {"src/parser.py", "tox.ini"}
    assert files('{"file_path": "/repo/lib/a.ts"}') == {"/repo/lib/a.ts"}
    assert files("self.remote_field.on_delete and kwargs.get") == set()


def test_a_result_on_a_file_the_agent_works_on_stays_whole() -> None:
    """Step 0 read parser.py; the agent reads other files since, still speaking of
    parser.py: every epoch clears the other old results and leaves parser.py's whole."""
    commands = ["nl -ba src/parser.py"] + [f"grep -n x src/module_{i}.py" for i in range(1, 30)]
    msgs = session(commands, "The bug is in src/parser.py.")
    out = last_epoch(rule(), msgs)
    assert out.messages[3] == msgs[3]  # parser.py's view, 30 results back
    assert out.messages[5]["content"].startswith(CLEARED)
    off = last_epoch(rule(keep_related=0), msgs)
    assert off.messages[3]["content"].startswith(CLEARED)
    assert related(msgs, [3, 5], 4) == {3} and related(msgs, [3, 5], 0) == set()
    assert command_of(msgs, 3) == msgs[2]["tool_calls"][0]["function"]["arguments"]
    assert_valid_rewrite(msgs, out)


def test_a_cleared_turns_long_tool_input_keeps_its_first_line_and_its_id() -> None:
    store = MemoryStore()
    msgs = session([SCRIPT] + [f"grep -n x src/module_{i}.py" for i in range(1, 30)])
    out = last_epoch(rule(store), msgs)
    sent = out.messages[2]["tool_calls"][0]
    assert sent["id"] == "call_0" and sent["function"]["name"] == "bash"
    args = json.loads(sent["function"]["arguments"])
    assert list(args) == ["command"]
    first, marker = args["command"].split("\n")
    assert first == "cat <<'EOF' > test_fix.py" and marker.startswith(f"{CLEARED} 34 lines; original: orig:")
    ref = REFERENCE.search(marker)
    assert ref is not None and stored_original(store, ref.group(0), scope="") == SCRIPT
    assert [m.get("tool_calls") for m in last_epoch(rule(input_chars=0), msgs).messages][2] == msgs[2]["tool_calls"]
    assert_valid_rewrite(msgs, out)


def test_short_or_non_object_inputs_stay_as_they_are() -> None:
    short = call(1, "ls")
    assert shorten_call(short, 300, CLEARED) == (short, [])
    raw = {"id": "c", "type": "function", "function": {"name": "apply_patch", "arguments": "*** Begin Patch\n" * 50}}
    assert shorten_call(raw, 300, CLEARED) == (raw, [])
    assert shorten_call(call(2, SCRIPT), 0, CLEARED) == (call(2, SCRIPT), [])


def test_a_shortened_call_is_a_valid_tool_use_on_messages() -> None:
    """The Messages dialect writes the shortened arguments back as the tool_use's input
    object; its id, name and its result's pairing stay."""
    body: dict[str, Any] = {"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": [
        {"role": "user", "content": TASK},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "bash",
                                           "input": {"command": SCRIPT}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]}]}
    parsed = BY_NAME["anthropic"].parse(json.dumps(body).encode())
    msgs: list[Any] = list(parsed.chat["messages"])
    msgs[1] = {**msgs[1], "tool_calls": [shorten_call(c, 300, CLEARED)[0] for c in msgs[1]["tool_calls"]]}
    sent = json.loads(parsed.splice(msgs))
    block = sent["messages"][1]["content"][0]
    assert block["type"] == "tool_use" and block["id"] == "toolu_1" and block["name"] == "bash"
    assert block["input"]["command"].startswith("cat <<'EOF' > test_fix.py\n" + CLEARED)
    assert sent["messages"][2] == body["messages"][2]
