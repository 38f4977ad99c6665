"""Cache breakpoints survive rewrites: property tests over generated conversations.

The generator knows which messages a simulated rewrite kept, compacted in place (a tool
result keeping its ``tool_call_id``), replaced, dropped or inserted, so the expected
markers come from that record, not from the code under test.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from context_engine.proxy.engine.breakpoints import restore
from context_engine.proxy.engine.prefix import MARK, canonical

CC = {"type": "ephemeral"}


@st.composite
def conversation(draw):
    n = draw(st.integers(2, 14))
    msgs = []
    for i in range(n):
        role = "system" if i == 0 and draw(st.booleans()) else ("user" if i % 2 else "assistant")
        if role == "user" and draw(st.booleans()):
            role = "tool"
        if draw(st.booleans()):
            parts = [{"type": "text", "text": f"m{i} part {j}"} for j in range(draw(st.integers(1, 3)))]
            msgs.append({"role": role, "content": parts})
        else:
            msgs.append({"role": role, "content": f"message {i}"})
        if role == "tool":
            msgs[-1]["tool_call_id"] = f"call_{i}"
    blocks = []
    for i, m in enumerate(msgs):
        blocks.append((i, -1))
        if isinstance(m["content"], list):
            blocks += [(i, j) for j in range(len(m["content"]))]
    chosen = draw(st.lists(st.sampled_from(blocks), max_size=6, unique=True))
    for i, j in chosen:
        ttl = {"type": "ephemeral", "ttl": f"{i}.{j}"}  # each marker tells where it came from
        if j == -1:
            msgs[i][MARK] = ttl
        else:
            msgs[i]["content"][j][MARK] = ttl
    ops = draw(st.lists(st.sampled_from(["keep", "copy", "replace", "drop", "compact"]),
                        min_size=n, max_size=n))
    inserts = draw(st.lists(st.integers(0, n), max_size=3))
    return msgs, ops, inserts


def rewrite(msgs, ops, inserts, compacted=None):
    """A rule-like rewrite: returns the new list and, per original message, where it went
    unchanged (``compacted``, if given, gets where each tool result compacted in place went)."""
    out: list[Any] = []
    where: list[int | None] = []
    compacted = {} if compacted is None else compacted
    for i, (m, op) in enumerate(zip(msgs, ops)):
        for _ in range(inserts.count(i)):
            out.append({"role": "user", "content": f"inserted before {i}"})
        if op == "drop":
            where.append(None)
            continue
        if op == "compact" and m["role"] == "tool":  # tool_json: same call id, new content
            compacted[i] = len(out)
            out.append({"role": "tool", "tool_call_id": m["tool_call_id"], "content": f"compact {i}"})
            where.append(None)
            continue
        if op == "replace":
            keep_marks = dict(m)  # a careless rule: a new content, the message's marker copied
            keep_marks["content"] = f"summary of {i}"
            if m["role"] == "tool":  # its call id kept: a tool result rewritten in place
                compacted[i] = len(out)
            out.append(keep_marks)
            where.append(None)
            continue
        where.append(len(out))
        out.append(m if op == "keep" else copy.deepcopy(m))
    out += [{"role": "user", "content": "inserted at the end"}] * inserts.count(len(msgs))
    return out, where


def marked(messages):
    """{(message index, part index or 'msg'): marker} of a request."""
    got: dict[tuple[int, int | str], Any] = {}
    for k, m in enumerate(messages):
        if MARK in m:
            got[(k, "msg")] = m[MARK]
        if isinstance(m.get("content"), list):
            for j, p in enumerate(m["content"]):
                if MARK in p:
                    got[(k, j)] = p[MARK]
    return got


def expected(msgs, out, where, compacted=None):
    want: dict[tuple[int, int | str], Any] = {}
    last = None
    for i, m in enumerate(msgs):
        own: list[tuple[int | str, Any]] = [("msg", m[MARK])] if MARK in m else []
        if isinstance(m["content"], list):
            own += [(j, p[MARK]) for j, p in enumerate(m["content"]) if MARK in p]
        if where[i] is not None:
            for j, v in own:
                want.setdefault((where[i], j), v)
            last = where[i]
            continue
        if compacted and i in compacted:
            last = compacted[i]  # the compacted result's markers stay on it, as on a kept block
        for j, v in own:
            if last is None:
                continue  # nothing kept before it: lost
            content = out[last]["content"]
            if isinstance(content, list):
                want.setdefault((last, len(content) - 1), v)
            elif not any(k == last for k, _ in want):  # string content holds one marker
                want[(last, "msg" if j == "msg" else 0)] = v
    return want


@given(conversation())
def test_markers_stay_on_kept_blocks_and_move_back_from_replaced_ones(case):
    msgs, ops, inserts = case
    before = json.dumps(msgs)
    compacted: dict[int, int] = {}
    out, where = rewrite(msgs, ops, inserts, compacted)
    got, moves = restore(msgs, out)
    assert json.dumps(msgs) == before, "the client's request is never mutated"
    assert len(got) == len(out)
    for a, b in zip(got, out):  # only markers change
        assert canonical(a) == canonical(b)
    have = marked(got)
    assert have == expected(msgs, out, where, compacted)
    n_client = len(marked(msgs))
    assert len(have) <= n_client
    assert moves.kept + moves.moved + moves.lost == n_client


@given(conversation())
def test_nothing_changes_without_a_rewrite_or_without_client_markers(case):
    msgs, ops, inserts = case
    assert restore(msgs, msgs)[0] is msgs
    plain = [canonical(m) for m in msgs]
    out, _ = rewrite(plain, ops, inserts)
    got, moves = restore(plain, out)
    assert got is out and moves.added == 0
    assert not marked(got)


def test_auto_breakpoints_only_where_the_client_set_none():
    msgs = [{"role": "system", "content": "sys"}] + [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"} for i in range(13)]
    rewritten = list(msgs)  # a rewrite that changed nothing but is a new list
    got, moves = restore(msgs, rewritten, auto=True, window=4, block=4)
    assert moves.added == 2
    have = marked(got)
    assert set(have) == {(0, 0), (8, 0)}  # after the system prompt; end of the closed blocks
    client: list[dict[str, Any]] = [dict(m) for m in msgs]
    client[5] = {**client[5], MARK: CC}
    got, moves = restore(client, list(client), auto=True)
    assert moves.added == 0 and marked(got) == {(5, "msg"): CC}


def _naive_where(msgs, out):
    """Per original message, the output index of an equal message (markers aside), in
    order; and where each other tool result went under its call id (compacted in place)."""
    where: list[int | None] = []
    floor = -1
    for m in msgs:
        hit = next((k for k in range(floor + 1, len(out)) if canonical(out[k]) == canonical(m)), None)
        if hit is not None:
            floor = hit
        where.append(hit)
    compacted: dict[int, int] = {}
    floor = -1
    for i, m in enumerate(msgs):
        at = where[i]
        if at is not None:
            floor = at
            continue
        later = [w for w in where[i + 1:] if w is not None]
        upper = later[0] if later else len(out)
        hit = next((k for k in range(floor + 1, upper) if m.get("role") == "tool"
                    and out[k].get("role") == "tool" and k not in where
                    and out[k].get("tool_call_id") == m.get("tool_call_id")), None)
        if hit is not None:
            compacted[i] = floor = hit
    return where, compacted


@st.composite
def agent_conversation(draw):
    """Tool calls with JSON results (tool_json compacts them), repeated calls and
    acknowledgements (fold_duplicates folds them), markers on random blocks."""
    msgs: list[Any] = [{"role": "system", "content": [{"type": "text", "text": "You are an agent."}]}]
    n = draw(st.integers(3, 10))
    for i in range(n):
        msgs.append({"role": "user", "content": draw(st.sampled_from(["ok", "thanks", f"task {i}"]))})
        q = draw(st.integers(0, 2))
        call = {"id": f"c{i}", "type": "function",
                "function": {"name": "lookup", "arguments": json.dumps({"q": q})}}
        msgs.append({"role": "assistant", "content": None, "tool_calls": [call]})
        rows: list[dict[str, Any]] = [{"id": k, "name": f"item {q}-{k}", "note": None, "tags": []}
                                      for k in range(6)]
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": json.dumps({"rows": rows}, indent=2)})
    msgs.append({"role": "user", "content": [{"type": "text", "text": "And now?"}]})
    for i in draw(st.lists(st.integers(0, len(msgs) - 1), max_size=5, unique=True)):
        m = msgs[i]
        if isinstance(m["content"], list):
            m["content"][0][MARK] = {"type": "ephemeral", "ttl": str(i)}
        else:
            m[MARK] = {"type": "ephemeral", "ttl": str(i)}
    return msgs


@given(agent_conversation())
def test_real_rules_never_move_lose_or_add_a_breakpoint_against_the_rules(msgs):
    import asyncio

    from context_engine.proxy.engine.engine import Engine
    from context_engine.proxy.settings import load_settings
    from context_engine.proxy.store.stores import MemoryStore

    settings = load_settings(flags={"rules": "fold_duplicates,tool_json", "store": "memory://"},
                             env={}, config_path="/dev/null")
    engine = Engine(settings, store=MemoryStore())
    try:
        rw = asyncio.run(engine.rewrite({"model": "gpt-4o", "messages": msgs}, "bp"))
    finally:
        engine.close()
    out = rw.result.ctx.messages
    if out is msgs:
        return  # nothing rewritten: the client's bytes go out
    bare = [canonical(m) for m in out]
    where, compacted = _naive_where(msgs, bare)
    assert marked(out) == expected(msgs, out, where, compacted)  # the parts as sent


def test_a_marker_on_the_newest_tool_result_stays_on_its_compacted_form():
    """Claude Code marks the newest message; when that is a tool result tool_json
    compacts, the marker stays on the compacted result (the prefix the client asked to
    cache), not on the assistant message before it."""
    import asyncio

    from context_engine.proxy.engine.engine import Engine
    from context_engine.proxy.settings import load_settings
    from context_engine.proxy.store.stores import MemoryStore

    rows: list[dict[str, Any]] = [{"id": k, "name": f"item {k}", "note": None, "tags": []}
                                  for k in range(8)]
    msgs: list[Any] = [{"role": "system", "content": "You are an agent."},
                       {"role": "user", "content": "list the items"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"rows": rows}, indent=2),
             MARK: CC}]
    settings = load_settings(flags={"rules": "tool_json", "store": "memory://"}, env={},
                             config_path="/dev/null")
    engine = Engine(settings, store=MemoryStore())
    try:
        out = asyncio.run(engine.rewrite({"model": "gpt-4o", "messages": msgs}, "bp")).result.ctx.messages
    finally:
        engine.close()
    assert out[3]["content"] != msgs[3]["content"]  # compacted
    assert marked(out) == {(3, "msg"): CC}


def test_the_stable_prefix_end_gets_a_marker_of_the_clients_kind_within_the_limit():
    from context_engine.proxy.engine.breakpoints import mark_stable
    from context_engine.proxy.engine.prefix import digest
    from context_engine.proxy.engine.recall_marks import mark

    hour = {"type": "ephemeral", "ttl": "1h"}
    msgs: list[Any] = [{"role": "system", "content": "You are an agent.", MARK: hour},
                       {"role": "user", "content": "the task"},
                       {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]},
                       {"role": "tool", "tool_call_id": "c1", "content": "[context-engine:cleared] orig:0123456789ab"},
                       {"role": "assistant", "content": None, "tool_calls": [{"id": "c2"}]},
                       {"role": "tool", "tool_call_id": "c2", "content": "whole", MARK: hour}]
    out = mark_stable(msgs, (4, digest(msgs[4])))  # a bare tool call: the result before it carries it
    assert out[3][MARK] == hour and out[:3] == msgs[:3] and out[4:] == msgs[4:]
    out = mark_stable(msgs, (0, digest(msgs[1])))  # text: as a text part, with the next marker's ttl
    assert out[1]["content"] == [{"type": "text", "text": "the task", MARK: hour}]
    assert mark_stable(msgs, (1, digest({"role": "user", "content": "gone"}))) is msgs  # no such message
    assert mark_stable(msgs, (0, digest(msgs[0]))) is msgs  # already marked
    bare = [{k: v for k, v in m.items() if k != MARK} for m in msgs]
    assert mark_stable(bare, (1, digest(bare[1]))) is bare  # the client set none: auto_breakpoints' case
    full = [{**m, MARK: CC} if m["role"] != "system" and i < 4 else m for i, m in enumerate(msgs)]
    assert mark_stable(full, (4, digest(full[4]))) is full  # four set already
    two = {"role": "system", "content": [{"type": "text", "text": "a", MARK: hour},
                                         {"type": "text", "text": "b", MARK: hour}]}
    three = [two, *msgs[1:3], {**msgs[3], MARK: hour}, *msgs[4:]]
    assert mark_stable(three, (1, digest(three[1]))) is three  # four in three messages
    # the recall suffix still reaches a placeholder whose text became a marked part
    parted = mark_stable(msgs, (4, digest(msgs[4])))
    parted[3] = {**parted[3], "content": [{"type": "text", "text": parted[3]["content"], MARK: CC}]}
    client = [*msgs[:3], {"role": "tool", "tool_call_id": "c1", "content": "the original"}, *msgs[4:]]
    sent = mark(client, parted, True, 0).messages[3]["content"]
    assert sent == [{"type": "text", "text": "[context-engine:cleared] orig:0123456789ab (context_recall)", MARK: CC}]


def test_the_stable_end_is_found_when_a_later_rule_folded_its_text():
    """compact names the end of the stable prefix; fold_duplicates, which runs after it,
    may fold that turn's text (an agent repeating "Run the tests again."). The turn keeps
    its tool call's id, and the breakpoint still goes on it: every request after the
    first epoch carries the client's two markers and the stable end's."""
    import asyncio

    from context_engine.proxy.engine.engine import Engine
    from context_engine.proxy.engine.prefix import has_mark, mark_count
    from context_engine.proxy.settings import load_settings
    from context_engine.proxy.store.stores import MemoryStore

    # short enough that compact never clears it (min_item_tokens), long enough to fold
    AGAIN = ("Run the tests again, the same way as before, and read what fails this time "
             "before changing anything else.\n```bash\npytest -q\n```")

    def step(i: int) -> list[Any]:
        again = i % 2 == 0 and i > 0  # every other turn repeats an earlier one, word for word
        text = (AGAIN if again else f"Look at part {i}.\n" + "why " * 80)
        call = {"id": f"c{i}", "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"cmd": "pytest -q" if again else f"cat p{i}.py"})}}
        out = "\n".join(f"p{i}.py:{n}: value_{i}_{n} = f({n})" for n in range(20))
        return [{"role": "assistant", "content": text, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": f"c{i}", "content": out}]

    options = {"trigger_tokens": 600, "clear_at_least": 100, "keep_recent": 1, "keep_prose": 1,
               "keep_related": 0, "min_item_tokens": 60, "min_horizon": 100, "gist_chars": 0}
    settings = dataclasses.replace(load_settings(flags={"rules": "compact,fold_duplicates", "store": "memory://"},
                                                 env={}, config_path="/dev/null"),
                                   rule_options={"compact": options})
    engine = Engine(settings, store=MemoryStore())
    history: list[Any] = [{"role": "system", "content": "You are an agent.", MARK: CC},
                          {"role": "user", "content": "Fix the parser."}]
    counts, folded = [], 0
    try:
        for i in range(16):
            history += step(i)
            sent = [*history[:-1], {**history[-1], MARK: CC}]  # the client marks the newest message
            out = asyncio.run(engine.rewrite({"model": "claude-sonnet-4-5", "messages": sent}, "fold")).result.ctx
            if out.compaction is not None and out.compaction.epoch:
                counts.append(mark_count(out.messages))
                folded += any("[repeats the earlier" in json.dumps(m) for m in out.messages if has_mark(m))
    finally:
        engine.close()
    assert counts and all(n == 3 for n in counts), counts
    assert folded  # the stable end was a folded turn at least once: the case this test is for
