"""The committed long tool-using sessions (bench/data/long_tools_dev.jsonl.gz) are sound.

They load through ``bench.cases``, are long enough, their evidence is visible in the
history, each next_action value is used by the recorded next call, the messages are valid
Chat Completions, and each cut's probes are what the cutter derives again from the history up to it.
With the source mirrors present, a rebuild reproduces the committed cases exactly.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

from context_engine.bench.cases import load_cases, resolve_file
from context_engine.bench.long_tools.build import FAMILIES, cases, record
from context_engine.bench.long_tools.cuts import cut_points, probes
from context_engine.bench.long_tools.sources import Mirror
from context_engine.bench.long_tools.summary import read

MIRRORS = Path(os.environ.get("CONTEXT_ENGINE_MIRRORS") or "/nonexistent")  # bare clones (build.py)


@pytest.fixture(scope="module")
def rows():
    return read(resolve_file("long_tools"))


def sessions(rows):
    out = defaultdict(list)
    for r in rows:
        out[r["meta"]["task"]].append(r)
    return out


def full_session(cuts):
    last = max(cuts, key=lambda r: r["meta"]["cut_index"])
    return last["messages"] + [last["meta"]["next_step"]]


def test_the_file_loads_as_cases_grouped_by_session(rows):
    path = resolve_file("long_tools")
    assert path.name == "long_tools_dev.jsonl.gz"
    grouped = load_cases(path, dedupe=True)
    assert len(load_cases(path)) == len(rows)
    assert len(grouped) == len(sessions(rows))
    assert all(len(c.cuts) >= 1 and c.dataset == "long-tool-sessions" for c in grouped)


def test_at_least_thirty_long_sessions_over_four_families(rows):
    by = sessions(rows)
    long = [t for t, cuts in by.items() if cuts[0]["meta"]["tool_calls"] >= 30]
    assert len(long) >= 30
    assert len({r["meta"]["family"] for r in rows}) >= 4
    assert all(20_000 <= cuts[0]["meta"]["full_tokens"] <= 120_000 for cuts in by.values())


def test_evidence_is_in_the_messages_and_next_actions_are_used(rows):
    for r in rows:
        contents = [str(m.get("content") or "") for m in r["messages"]]
        args = " ".join(c["function"]["arguments"] for c in r["meta"]["next_step"]["tool_calls"])
        for p in r["probes"]:
            assert p["evidence"], r["id"]
            for ev in p["evidence"]:
                assert any(ev in text for text in contents), (r["id"], ev)
            if p["kind"] == "next_action":
                assert p["answer"] in args or json.dumps(p["answer"])[1:-1] in args, (r["id"], p["answer"])
    kinds = {p["kind"] for r in rows for p in r["probes"]}
    assert kinds == {"next_action", "task"}


def test_messages_are_valid_chat_completions(rows):
    for r in rows:
        msgs = r["messages"]
        assert msgs[-1]["role"] == "tool" and r["meta"]["next_step"]["role"] == "assistant"
        waiting: list[str] = []
        for m in msgs:
            assert m["role"] in ("system", "user", "assistant", "tool")
            if m["role"] == "tool":
                assert waiting and m["tool_call_id"] == waiting.pop(0), r["id"]
                continue
            assert not waiting, r["id"]  # every call is answered before the next turn
            for c in m.get("tool_calls") or ():
                json.loads(c["function"]["arguments"])
                waiting.append(c["id"])
        assert not waiting


def test_cuts_and_probes_are_rederived_identically(rows):
    for task, cuts in sessions(rows).items():
        full = full_session(cuts)
        assert len(cut_points(full)) >= 1  # the full session's cuts differ; a cut's probes do not
        for r in cuts:
            assert probes(full, r["meta"]["cut_index"]) == r["probes"], task


@pytest.mark.skipif(not (MIRRORS / "sierra-research+tau-bench").is_dir(),
                    reason="source mirrors absent (a maintainer's build input; CI reads the committed file)")
def test_a_rebuild_reproduces_the_committed_sessions(rows):
    committed = {r["id"]: r for r in rows}
    for family in FAMILIES:
        env, tools, sources = family.load(Mirror(family.repo, MIRRORS))
        first = cases(family, record(family, env, 0), tools, sources)
        again = cases(family, record(family, env, 0), tools, sources)
        assert first == again
        for case in first:
            assert json.loads(json.dumps(case, ensure_ascii=False, sort_keys=True)) == committed[case["id"]]
