"""compact: epochs fire when they pay and only then; between epochs every request extends
the one before byte for byte; pinned content stays; the line is committed to the store,
so replicas and restarts agree; an idle session compacts at no miss cost."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from context_engine.proxy.engine.messages import text_of
from context_engine.proxy.engine.originals import REFERENCE, stored_original
from context_engine.proxy.engine.sessions import FENCE, observations, session_kind
from context_engine.proxy.store.stores import MemoryStore, StoreUnavailable
from context_engine.rules.compact import Compact
from context_engine.rules.compact.config import CompactConfig
from context_engine.rules.compact.placeholder import CLEARED
from tests.harness import assert_valid_rewrite, make_ctx, make_deps

TASK = "Fix the bug in parser.py: parse('a,b') returns ['a'] instead of ['a', 'b']."
SMALL: dict[str, Any] = {"trigger_tokens": 1500, "clear_at_least": 300, "keep_recent": 2,
                         "keep_prose": 2, "min_item_tokens": 20,
                         "way_back": False}  # epoch mechanics; way_back: test_compact_ids.py


def output(i: int) -> str:
    return "\n".join(f"src/module_{i}.py:{n}: value_{i}_{n} = compute({n}, 'field_{n}')"
                     for n in range(40))


def agent_session(steps: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                  {"role": "user", "content": TASK}]
    for i in range(steps):
        msgs.append({"role": "assistant",
                     "content": f"THOUGHT: step {i}, I look at module {i} to find the caller.",
                     "tool_calls": [{"id": f"call_{i}", "type": "function", "function": {
                         "name": "bash", "arguments": json.dumps({"command": f"grep -n x m{i}"})}}]})
        msgs.append({"role": "tool", "tool_call_id": f"call_{i}", "content": output(i)})
    return msgs


def requests(msgs: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """What the agent sends: the history up to each tool result."""
    return [msgs[: i + 1] for i, m in enumerate(msgs) if m["role"] == "tool"]


def rule(store: Any = None, clock: Any = None, **options: Any) -> Compact:
    config = CompactConfig(**{**SMALL, **options})
    deps = make_deps(store=store if store is not None else MemoryStore())
    return Compact(config, deps) if clock is None else Compact(config, deps, clock)


def apply(r: Compact, messages: list[dict[str, Any]], model: str = "gpt-5",
          session: str = "s1") -> Any:
    return asyncio.run(r.apply(make_ctx(messages, model=model, session_id=session)))


def cleared(messages: list[Any]) -> list[int]:
    return [i for i, m in enumerate(messages) if text_of(m).startswith(CLEARED)]


def test_an_agent_session_is_told_from_a_chat() -> None:
    assert session_kind(agent_session(2)) == "agent"
    assert session_kind([{"role": "user", "content": "hi"}]) == "chat"
    assert session_kind([{"role": "user", "content": "hi"}], forced="agent") == "agent"
    text_agent = [{"role": "user", "content": TASK}]
    for i in range(3):
        text_agent += [{"role": "assistant", "content": f"THOUGHT\n```bash\nls {i}\n```"},
                       {"role": "user", "content": f"file_{i}.py"}]
    assert session_kind(text_agent) == "agent"
    assert observations(text_agent) == {2, 4, 6}


def test_a_chat_whose_answers_hold_some_code_is_a_chat() -> None:
    """A long chat (LongMemEval's histories) where a few answers carry a code block, each
    followed by the user's next question: no harness acts on one turn in ten."""
    chat = [{"role": "user", "content": "I need help with my garden and a script."}]
    for i in range(20):
        answer = f"Try this:\n```python\nprint({i})\n```" if i % 6 == 0 else f"Plant basil {i}."
        chat += [{"role": "assistant", "content": answer},
                 {"role": "user", "content": f"thanks, and question {i}?"}]
    assert sum(FENCE in text_of(m) for m in chat) >= 3
    assert session_kind(chat) == "chat"
    assert observations(chat) == frozenset()


def test_between_epochs_each_request_extends_the_one_before() -> None:
    r = rule()
    outs = [apply(r, req) for req in requests(agent_session(30))]
    fired = [k for k, o in enumerate(outs) if o.compaction.fired]
    assert fired, "the session grew past the trigger: an epoch must fire"
    assert len(fired) < len(outs) // 3  # rare steps, not a sliding window
    for k in range(1, len(outs)):
        prev, cur = outs[k - 1].messages, outs[k].messages
        if k in fired:
            assert cur[: len(prev)] != prev  # an epoch rewrites the prefix (once)
        else:
            assert cur[: len(prev)] == prev, f"request {k} broke the prefix between epochs"
    for o in outs:
        assert_valid_rewrite(o.original or o.messages, o) if o.original else None


def test_an_epoch_keeps_the_task_the_recent_results_and_names_each_original() -> None:
    store = MemoryStore()
    r = rule(store)
    msgs = agent_session(30)
    out = None
    for req in requests(msgs):
        out = apply(r, req)
    assert out is not None and out.compaction.epoch >= 1
    sent = out.messages
    assert sent[1]["content"] == TASK
    assert sent[-1] == msgs[-1] and sent[-3] == msgs[-3]  # keep_recent: 2 results whole
    assert [m.get("tool_calls") for m in sent] == [m.get("tool_calls") for m in msgs]
    for i in cleared(sent):
        ref = REFERENCE.search(sent[i]["content"])
        assert ref is not None
        assert stored_original(store, ref.group(0), scope="") == msgs[i]["content"]
    assert_valid_rewrite(msgs, out)


def test_no_epoch_below_the_trigger_or_when_it_does_not_pay() -> None:
    msgs = agent_session(30)
    assert not cleared(apply(rule(trigger_tokens=10**6), msgs).messages)
    # a miss that the guessed remaining requests cannot pay back
    assert not cleared(apply(rule(min_horizon=0, max_horizon=0), msgs).messages)
    assert not cleared(apply(rule(clear_at_least=10**6), msgs).messages)


def test_a_chat_is_left_to_the_chat_rules() -> None:
    chat = [{"role": "system", "content": "Be kind."}] + [
        {"role": "user" if i % 2 == 0 else "assistant", "content": output(i)} for i in range(20)]
    out = apply(rule(), chat)
    assert out.messages is chat and out.compaction is None
    planned = apply(rule(sessions="all"), chat).compaction
    assert planned is not None and planned.kind == "chat"


def test_replicas_sharing_a_store_send_the_same_bytes() -> None:
    store = MemoryStore()
    replicas = [rule(store), rule(store)]
    single = rule(MemoryStore())
    for k, req in enumerate(requests(agent_session(30))):
        a = apply(replicas[k % 2], req)
        b = apply(single, req)
        assert json.dumps(a.messages) == json.dumps(b.messages), f"request {k}"


def test_a_restart_continues_the_committed_line() -> None:
    store = MemoryStore()
    reqs = requests(agent_session(30))
    first = rule(store)
    for req in reqs[:20]:
        apply(first, req)
    restarted = rule(store)  # a new process, the same store
    continued = [apply(restarted, req).messages for req in reqs[20:]]
    straight = rule(MemoryStore())
    expected = [apply(straight, req).messages for req in reqs][20:]
    assert continued == expected


def test_an_idle_session_compacts_at_no_miss_cost() -> None:
    now = [1000.0]
    r = rule(clock=lambda: now[0], min_horizon=0, max_horizon=0, cache_ttl=300)
    reqs = requests(agent_session(30))
    for req in reqs[:-1]:
        assert not apply(r, req).compaction.fired  # never pays with no requests ahead
        now[0] += 5
    now[0] += 301  # the provider's cache has expired
    out = apply(r, reqs[-1])
    assert out.compaction.fired and out.compaction.reason == "cache cold"
    assert out.compaction.miss_tokens == 0


def test_a_client_that_edits_its_history_starts_a_new_line() -> None:
    r = rule()
    msgs = agent_session(30)
    for req in requests(msgs):
        out = apply(r, req)
    assert cleared(out.messages)
    edited = [dict(m) for m in msgs]
    edited[3] = {**edited[3], "content": "(the client compacted this itself)"}
    again = apply(r, edited)
    assert_valid_rewrite(edited, again)
    assert again.messages[3]["content"] == "(the client compacted this itself)"


def test_instructions_and_the_task_stay_while_observations_go() -> None:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You run commands."},
                                  {"role": "user", "content": TASK}]
    for i in range(30):
        msgs += [{"role": "assistant", "content": f"THOUGHT {i}\n```bash\ngrep -n x m{i}\n```"},
                 {"role": "user", "content": output(i)}]
        if i == 10:
            msgs += [{"role": "assistant", "content": "Shall I also fix the tests?"},
                     {"role": "user", "content": "Yes, and keep the old API working."}]
    out = apply(rule(), msgs)
    assert out.kind == "agent" and cleared(out.messages)
    texts = [text_of(m) for m in out.messages]
    assert TASK in texts and "Yes, and keep the old API working." in texts
    assert_valid_rewrite(msgs, out)


def test_unknown_models_plan_with_the_assumed_prices() -> None:
    out = apply(rule(), agent_session(30), model="my-local-model")
    assert out.compaction.assumed
    assert not apply(rule(), agent_session(30)).compaction.assumed


class DownStore(MemoryStore):
    def get(self, key: str) -> bytes | None:
        raise StoreUnavailable("down")

    def set(self, key: str, value: bytes) -> None:
        raise StoreUnavailable("down")


def test_a_store_outage_fires_no_epoch() -> None:
    out = apply(rule(DownStore()), agent_session(30))
    assert not cleared(out.messages) and not out.compaction.fired


def test_bad_sessions_option_is_refused() -> None:
    with pytest.raises(ValueError, match="sessions"):
        rule(sessions="chats")


def text_action_session(steps: int, heredoc_at: int = -1) -> list[dict[str, Any]]:
    """A text-action harness (mini-swe-agent): each command a fenced block in the reply,
    each result a user turn."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You run one command per reply."},
                                  {"role": "user", "content": TASK}]
    for i in range(steps):
        command = f"grep -n x m{i}"
        if i == heredoc_at:
            command = "cat <<'EOF' > fix.py\n" + "\n".join(f"line_{n} = {n}" for n in range(60)) + "\nEOF"
        msgs += [{"role": "assistant", "content": f"THOUGHT: step {i}. The caller of parse lives in "
                  f"module {i}; I read its uses to see which argument it passes.\n\n```bash\n{command}\n```"},
                 {"role": "user", "content": output(i)}]
    return msgs


def test_a_text_action_agents_cleared_turns_keep_their_commands() -> None:
    store = MemoryStore()
    msgs = text_action_session(30, heredoc_at=3)
    out = apply(rule(store), msgs)
    turns = [i for i in cleared(out.messages) if out.messages[i]["role"] == "assistant"]
    assert turns and 4 in turns and 8 in turns
    kept = out.messages[4]["content"]  # step 1: its prose is gone, its command is not
    assert "THOUGHT" not in kept and kept.endswith("\n```bash\ngrep -n x m1\n```")
    heredoc = out.messages[8]["content"]  # step 3: the long command keeps its first line
    ref = REFERENCE.search(heredoc)
    assert ref is not None and heredoc.count(ref.group(0)) == 2
    assert "```bash\ncat <<'EOF' > fix.py\n" + CLEARED + " 62 lines; original: " + ref.group(0) in heredoc
    assert "line_30" not in heredoc
    assert stored_original(store, ref.group(0), scope="") == msgs[8]["content"]
    assert_valid_rewrite(msgs, out)


def test_a_tool_agents_cleared_turns_keep_their_commands_in_the_calls_only() -> None:
    msgs = agent_session(30)
    for m in msgs:
        if m["role"] == "assistant":
            m["content"] += "\n\n```bash\ngrep -n x\n```"
    out = apply(rule(), msgs)
    turns = [i for i in cleared(out.messages) if out.messages[i]["role"] == "assistant"]
    assert turns
    for i in turns:
        assert FENCE not in out.messages[i]["content"]
        assert out.messages[i]["tool_calls"] == msgs[i]["tool_calls"]


def test_an_unclosed_fence_is_no_command() -> None:
    from context_engine.rules.compact.inputs import actions, fenced

    assert fenced("a\n```bash\nls\n```\nb\n```py\nprint(1)") == ["```bash\nls\n```"]
    assert actions("```bash\nls -la\n```", 0, CLEARED, "orig:0") == ""
    assert actions("no command here", 300, CLEARED, "orig:0") == ""


def test_the_first_epoch_of_a_client_without_tools_misses_from_its_first_change() -> None:
    """The first epoch adds ``context_recall`` to the client's tools, a change before every
    message; a client that sent none gets none, so only what the epoch cleared misses."""
    msgs = text_action_session(30)
    bash = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
    misses = {}
    for tools in (bash, None):
        r = rule()
        ctx = make_ctx(msgs, model="gpt-5", session_id="s1", tools=tools)
        out = asyncio.run(r.apply(ctx))
        assert out.compaction is not None and out.compaction.fired
        misses[bool(tools)] = out.compaction.miss_tokens
    assert 0 < misses[False] < misses[True]
