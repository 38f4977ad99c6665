"""Shadow and A/B modes, /metrics, /stats and the report views."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from context_engine.proxy.billing.row_bill import row_costs
from context_engine.proxy.engine import modes
from context_engine.proxy.reporting.ab_compare import compare
from context_engine.proxy.reporting.report import build, to_csv
from tests.fakes.rules import DropOldAssistant

MSGS = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "Tell me about Lisbon."},
    {"role": "assistant", "content": "Lisbon is the capital of Portugal, on the Tagus river."},
    {"role": "user", "content": "and Porto?"},
]


def post(proxy, headers=None, messages=MSGS):
    return httpx.post(proxy.url + "/v1/chat/completions", json={"model": "gpt-4o", "messages": messages},
                      headers=headers or {})


def test_shadow_forwards_the_client_bytes_and_records_would_be_savings(start_proxy, mock):
    proxy = start_proxy(rules=[DropOldAssistant()], mode="shadow")
    body = json.dumps({"model": "gpt-4o", "messages": MSGS}, indent=1).encode()
    r = httpx.post(proxy.url + "/v1/chat/completions", content=body)
    assert r.status_code == 200 and mock.received[-1].body == body
    row = proxy.rows()[-1]
    assert row["arm"] == "shadow" and row["mode"] == "shadow"
    assert row["tokens_sent"] < row["tokens_original"]
    assert json.loads(row["rule_savings"])["drop_old_assistant"] == row["tokens_original"] - row["tokens_sent"]
    assert row["prompt_tokens"] == row["tokens_original"]  # the upstream saw the original


def test_mode_header_overrides_per_request(start_proxy, mock):
    proxy = start_proxy(rules=[DropOldAssistant()])
    post(proxy, {"X-Context-Engine-Mode": "shadow"})
    assert mock.received[-1].json()["messages"] == MSGS
    post(proxy)
    assert mock.received[-1].json()["messages"] != MSGS
    r = post(proxy, {"X-Context-Engine-Mode": "turbo"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "x-context-engine-mode"


def test_ab_assignment_is_stable_and_matches_the_share():
    share = 0.3
    arms = [modes.arm("ab", f"session-{i}", share) for i in range(10_000)]
    assert abs(arms.count("rewrite") / 10_000 - share) < 0.015
    assert arms == [modes.arm("ab", f"session-{i}", share) for i in range(10_000)]
    assert modes.arm("ab", "x", 0.0) == "passthrough" and modes.arm("ab", "x", 1.0) == "rewrite"


def test_ab_mode_rewrites_only_its_arm(start_proxy, mock):
    proxy = start_proxy(rules=[DropOldAssistant()], mode="ab", ab_share=0.5)
    for i in range(12):
        post(proxy, {"X-Session-Id": f"user-{i}"})
        rewritten = mock.received[-1].json()["messages"] != MSGS
        row = proxy.rows()[-1]
        assert (row["arm"] == "rewrite") == rewritten
        assert row["arm"] == modes.arm("ab", row["session"], 0.5)
    arms = {r["arm"] for r in proxy.rows()}
    assert arms == {"rewrite", "passthrough"}


def _row(session, arm, prompt, status=200, finish="stop", retries=0):
    return {"mode": "ab", "arm": arm, "session": session, "model": "gpt-4o", "prompt_tokens": prompt,
            "cached_tokens": 0, "completion_tokens": 0, "tokens_original": prompt, "tokens_sent": prompt,
            "status": status, "finish_reason": finish, "tool_retries": retries}


def test_ab_report_arithmetic_on_a_hand_built_ledger():
    rows = [_row("a", "rewrite", 100), _row("a", "rewrite", 300), _row("b", "rewrite", 200),
            _row("c", "passthrough", 400), _row("d", "passthrough", 600, status=500, finish="length", retries=2)]
    ab = compare(rows)
    costs = row_costs(_row("x", "rewrite", 1))
    assert costs is not None
    p = costs[1]  # $ per prompt token
    rw, pt = ab["arms"]["rewrite"], ab["arms"]["passthrough"]
    assert (rw["sessions"], rw["requests"], pt["sessions"], pt["requests"]) == (2, 3, 2, 2)
    assert rw["cost_per_request"] == pytest.approx(200 * p)  # sessions a (mean 200) and b (200)
    assert pt["cost_per_request"] == pytest.approx(500 * p)
    assert pt["error_share"] == 0.5 and pt["cut_share"] == 0.5 and pt["tool_retries_per_request"] == 1.0
    assert rw["turns_per_session"] == 1.5
    d = ab["cost_diff"]
    assert d["diff"] == pytest.approx(-300 * p)
    # rewrite sessions have zero variance; passthrough means 400 and 600: se = sqrt(20000 / 2) * p
    assert d["ci_high"] - d["diff"] == pytest.approx(1.96 * 100 * p)


def test_metrics_parse_and_count(start_proxy):
    proxy = start_proxy(rules=[DropOldAssistant()])
    post(proxy)
    post(proxy)
    proxy.rows()
    text = httpx.get(proxy.url + "/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    req = [s for s in families["context_engine_requests"].samples if s.name.endswith("_total")]
    assert sum(s.value for s in req) == 2
    saved = [s for s in families["context_engine_rule_saved_tokens"].samples if s.name.endswith("_total")]
    assert saved[0].labels["rule"] == "drop_old_assistant" and saved[0].value > 0
    assert "context_engine_proxy_added_ms" in families and "context_engine_upstream_ms" in families


def test_stats_json_matches_the_ledger(start_proxy):
    proxy = start_proxy(rules=[DropOldAssistant()])
    for _ in range(3):
        post(proxy)
    stats = httpx.get(proxy.url + "/stats?since=1h").json()
    rows = proxy.rows()
    assert stats["overall"]["requests"] == 3
    assert stats["overall"]["tokens_original"] == sum(r["tokens_original"] for r in rows)
    assert stats["by_rule"][0]["rule"] == "drop_old_assistant" and stats["by_rule"][0]["fired"] == 3
    assert len(stats["slowest"]) == 3
    assert httpx.get(proxy.url + "/stats?since=later").status_code == 400


def test_report_views(start_proxy):
    proxy = start_proxy(rules=[DropOldAssistant()])
    post(proxy, {"X-Session-Id": "s1"})
    post(proxy, {"X-Session-Id": "s2"})
    rows = proxy.rows()
    data = build(rows, "rule")
    assert data["rows"][0]["saved"] == sum(r["tokens_original"] - r["tokens_sent"] for r in rows)
    assert len(build(rows, "session")["rows"]) == 2
    assert to_csv(build(rows, "day")).splitlines()[0].startswith("key,requests,")
    for by, fmt in (("rule", "table"), ("session", "json"), ("day", "csv")):
        r = subprocess.run([sys.executable, "-m", "context_engine.proxy.cli", "report", "--ledger", proxy.ledger_path,
                            "--config", "/dev/null", "--by", by, "--format", fmt],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        if fmt == "json":
            assert json.loads(r.stdout)["overall"]["requests"] == 2
        elif fmt == "csv":
            assert r.stdout.splitlines()[0].startswith("key,requests,")
        else:
            assert "drop_old_assistant" in r.stdout
