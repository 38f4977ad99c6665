"""The agents' own auto-compaction through the proxy, with the real CLIs against the
loopback mock (``bench/agent_compaction.py`` drives them: a scripted shell loop, usage
counted from what the mock received, the agent's summary request answered).

Claude Code (2.1.197, its default model) compacts when the provider rejects a request as
too long. The proxy's budget would cut that request to fit, and Claude Code would never
compact: ``budget.as_sent_agents`` sends it as the agent sent it, so it compacts at the
same request as direct. Skipped, with the reason, when the CLI is not installed."""

from __future__ import annotations

import shutil

import pytest

from context_engine.bench.agent_compaction import run_once

pytestmark = pytest.mark.slow  # real agent CLIs

WINDOW = 60_000  # the mock's "prompt is too long" limit, and the proxy's budget


@pytest.mark.skipif(shutil.which("claude") is None,
                    reason="Claude Code not installed (npm i -g @anthropic-ai/claude-code)")
def test_claude_code_compacts_through_the_proxy_where_it_would_direct(tmp_path):
    runs = [run_once("claude", 8, proxied, tmp_path / str(proxied), lowered=False, window=WINDOW)
            for proxied in (False, True)]
    direct, proxied = runs
    for run in runs:
        assert run["exit"] == 0 and run["finished"], run["tail"]
    assert direct["compaction_at"], "direct, Claude Code never compacted: the scenario is off"
    rejected = [q["index"] for q in direct["requests"] if q["rejected"]]
    assert rejected and rejected[0] + 1 == direct["compaction_at"][0]
    assert proxied["compaction_at"] == direct["compaction_at"]
    assert [q["index"] for q in proxied["requests"] if q["rejected"]] == rejected
    # what the agent holds stays what it holds direct (without as_sent: twice as much by the end)
    assert proxied["max_client_tokens"] <= direct["max_client_tokens"] * 1.02


@pytest.mark.skipif(shutil.which("claude") is None,
                    reason="Claude Code not installed (npm i -g @anthropic-ai/claude-code)")
def test_claude_code_takes_the_breakpoint_compact_adds_where_its_prefix_stays(tmp_path):
    """Claude Code marks its two system blocks and the newest message (3 of Anthropic's
    4). After an epoch, ``compact.mark_stable`` adds the fourth where the stable prefix
    ends; the mock refuses what Anthropic refuses (more than 4, a 1-hour mark after a
    5-minute one), and the agent finishes its task."""
    config = tmp_path / "config.yaml"
    config.write_text("rule_options:\n  compact: {trigger_tokens: 2000, clear_at_least: 200, min_horizon: 100,"
                      " keep_recent: 1, keep_prose: 1, min_item_tokens: 10}\n")
    run = run_once("claude", 8, True, tmp_path / "run", lowered=False, config=str(config))
    assert run["exit"] == 0 and run["finished"], run["tail"]
    before = [q["breakpoints"] for q in run["requests"] if not q["cleared"]]
    after = [q["breakpoints"] for q in run["requests"] if q["cleared"]]
    assert before and set(before) == {3}  # the agent's own
    assert after and set(after) == {4}  # one more, never past the limit
