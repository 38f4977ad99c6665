"""``mode: ab`` judges both sides: the verdict on a harmless and a harmful ledger, and
``ab.guard`` turning a rule that makes agents re-read off for new sessions, end to end
through a real proxy (old sessions keep their rules)."""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import pytest

from context_engine.proxy.recording.ledger import read_rows
from context_engine.proxy.reporting import ab_verdict, report
from context_engine.proxy.settings import ConfigError, load_settings
from tests.test_quality_signals import COMPACT, again, post, session

CLEARED = "[context-engine:cleared]"


def sent_messages(mock: Any, since: int) -> list[dict[str, Any]]:
    (body,) = [json.loads(r.body) for r in mock.received[since:]]
    return body["messages"]


def test_the_guard_turns_a_rereading_rule_off_for_new_sessions_only(start_proxy, mock, caplog):
    p = start_proxy(enabled="compact", rule_options=COMPACT, mode="ab", ab_share=1.0,
                    ab_guard_rereads_per_session=0.5, ab_guard_min_sessions=2)
    old = {}
    with caplog.at_level(logging.WARNING, logger="context_engine.finish"):
        for task in ("First task.", "Second task."):
            post(p, session(12, task))  # compact clears the first views …
            old[task] = again(session(12, task), 0)
            post(p, old[task])  # … and the agent cats one again: a re-read
            rows = p.rows()
            assert rows[-1]["arm"] == "rewrite" and rows[-1]["rereads"] == 1
            assert p.app.state.engine.guard.off == (frozenset() if task == "First task." else {"compact"})
    assert "ab.guard: rule compact off for new sessions: 2 re-reads in 2 rewritten sessions" in caplog.text
    (note,) = read_rows(p.ledger_path, notes=True)
    evidence = json.loads(note["guard"])
    assert evidence["rule"] == "compact" and evidence["rereads"] == 2 and evidence["sessions"] == 2
    assert evidence["threshold"] == 0.5 and note["arm"] == "guard"
    assert all(r["arm"] != "guard" for r in read_rows(p.ledger_path))  # not a request

    since = len(mock.received)
    post(p, session(12, "A new task."))  # a new session: compact is off
    assert CLEARED not in json.dumps(sent_messages(mock, since))
    assert "compact" not in json.loads(p.rows()[-1]["rule_savings"])

    since = len(mock.received)
    post(p, again(old["First task."], 1, "again2"))  # an old session keeps its rules
    assert CLEARED in sent_messages(mock, since)[3]["content"]
    row = p.rows()[-1]
    assert "compact" in json.loads(row["rule_savings"]) and row["rereads"] == 1


def test_without_the_guard_no_rule_is_turned_off(start_proxy):
    p = start_proxy(enabled="compact", rule_options=COMPACT, mode="ab", ab_share=1.0)
    for task in ("One.", "Two.", "Three."):
        post(p, session(12, task))
        post(p, again(session(12, task), 0))
    assert p.app.state.engine.guard.off == frozenset()
    assert read_rows(p.ledger_path, notes=True) == []


@pytest.mark.parametrize("bad", [{"ab_guard_rereads_per_session": -1}, {"ab_guard_min_sessions": 0}])
def test_a_bad_guard_setting_stops_start_up_naming_it(bad):
    with pytest.raises(ConfigError, match=next(iter(bad))):
        load_settings(flags=bad, env={}, config_path=os.devnull)


def ab_ledger(harmful: bool, sessions: int = 20) -> list[dict[str, Any]]:
    """``sessions`` per arm; the rewrite arm sends fewer tokens; ``harmful``: its agents
    re-read and take three more turns per session."""
    rows = []
    for arm in ("rewrite", "passthrough"):
        for s in range(sessions):
            turns = 6 + s % 3 + (3 if harmful and arm == "rewrite" else 0)
            for t in range(turns):
                prompt = (7000 if arm == "rewrite" else 10000) + 100 * (s % 5) + 10 * t
                reread = harmful and arm == "rewrite" and t == 2
                rows.append({"session": f"{arm}-{s}", "mode": "ab", "arm": arm, "model": "gpt-4o",
                             "ts": 1000.0 + t, "status": 200, "prompt_tokens": prompt,
                             "cached_tokens": 0, "completion_tokens": 50,
                             "tokens_original": 10000, "tokens_sent": prompt,
                             "finish_reason": "stop" if t == turns - 1 else "tool_calls",
                             "repeat_reads": 1 if t == 3 and s % 4 == 0 else 0,
                             "rereads": 1 if reread else 0,
                             "reread_rules": json.dumps({"compact": [1, 800]} if reread else {})})
    return rows


def test_a_harmless_ledger_gets_no_detectable_harm_with_its_intervals():
    j = ab_verdict.judge(ab_ledger(harmful=False))
    assert j["sessions"] == {"rewrite": 20, "passthrough": 20}
    assert 0.6 < j["cost"]["ratio"] < 0.8 and j["cost"]["ci"][0] < j["cost"]["ratio"] < j["cost"]["ci"][1]
    reads = j["signals"]["reads"]
    assert reads["ci"][0] <= 0 <= reads["ci"][1] and not reads["harm"]
    assert j["verdict"].startswith("rules cost 0.")
    assert j["verdict"].endswith(": no detectable harm") and "reads per session [" in j["verdict"]
    assert ab_verdict.judge(ab_ledger(harmful=False)) == j  # a fixed seed: the same verdict


def test_a_harmful_ledger_gets_harm_naming_the_signals():
    j = ab_verdict.judge(ab_ledger(harmful=True))
    turns = j["signals"]["turns"]
    assert turns["diff"] == pytest.approx(3.0) and turns["ci"][0] > 0 and turns["harm"]
    assert j["signals"]["reads"]["harm"]
    assert "+3.0 turns per session [" in j["verdict"]
    assert j["verdict"].endswith(": harm (reads per session, turns per session)")
    text = " ".join(str(x) for x in report.render(report.build(ab_ledger(harmful=True), "model")))
    assert "A/B verdict: rules cost" in text and "harm (reads per session, turns per session)" in text


def test_too_few_sessions_say_so():
    j = ab_verdict.judge(ab_ledger(harmful=True, sessions=1))
    assert j["verdict"].startswith("not enough sessions to judge (1 rewritten, 1 passthrough")
