"""The pure parts of ``bench/load_extras.py``: padded tool results, the RSS trend, the phase plan."""

import argparse
import json

from context_engine.bench.hostile import hostile_bodies
from context_engine.bench.load_extras import pad_tool_results, plan, rss_trend


def _args(**over):
    base = dict(phases="", no_floor=False, cold=0, rules=None, long_streams=0, hostile_rps=0.0,
                extras_only=False)
    return argparse.Namespace(**{**base, **over})


def test_tool_results_grow_to_the_size_asked_and_differ_by_tag():
    msgs = [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "c", "content": "ok"}]
    a, b = pad_tool_results(msgs, 3, "s0r0"), pad_tool_results(msgs, 3, "s1r0")
    assert a[0] is msgs[0] and len(a[1]["content"]) == 3 * 1024 and a[1]["content"].startswith("ok\n")
    assert a[1]["content"] != b[1]["content"] and a == pad_tool_results(msgs, 3, "s0r0")
    assert pad_tool_results(msgs, 0, "x") is msgs


def test_rss_trend_is_the_slope_after_warm_up_in_mb_a_minute():
    samples = [(float(t), 100.0 + t / 60) for t in range(0, 600, 5)]  # 1 MB a minute
    slope, first, last = rss_trend(samples).values()
    assert slope is not None and abs(slope - 1.0) < 0.01
    assert first is not None and last is not None and last > first
    assert rss_trend(samples[:1])["mb_per_min"] is None


def test_each_phase_runs_without_then_with_the_extras():
    assert plan(_args()) == [("floor", None, False), ("passthrough", "", False), ("proxy", None, False)]
    assert plan(_args(phases="floor,proxy", long_streams=5)) == [
        ("floor", None, False), ("floor+streams", None, True),
        ("proxy", None, False), ("proxy+streams", None, True)]
    assert plan(_args(phases="proxy", hostile_rps=1.0, extras_only=True)) == [
        ("proxy+hostile", None, True)]


def test_hostile_bodies_are_valid_json_without_a_key():
    bodies = hostile_bodies(0.01)
    assert {k for k, _, _ in bodies} == {"budget_history", "many_marks", "blocks_results",
                                         "model_100k", "tool_json"}
    for _, path, raw in bodies:
        assert path.startswith("/v1/") and "messages" in json.loads(raw)
