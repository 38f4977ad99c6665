"""The ``api`` dimension: ledger column, /stats, /metrics and ``report --by api``."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.fakes.rules import DropOldAssistant

TURNS = [("user", "What is 2+2?"), ("assistant", "4"), ("user", "And 3+3?")]


def _send_one_of_each(proxy) -> None:
    msgs = [{"role": r, "content": c} for r, c in TURNS]
    httpx.post(proxy.url + "/v1/chat/completions", json={"model": "gpt-4o", "messages": msgs})
    httpx.post(proxy.url + "/v1/responses", json={"model": "gpt-4o", "input": msgs})
    httpx.post(proxy.url + "/v1/messages", json={"model": "claude-sonnet-4-5", "max_tokens": 9,
                                                 "messages": msgs}, headers={"x-api-key": "k"})


def test_every_view_splits_by_api(start_proxy):
    proxy = start_proxy(rules=[DropOldAssistant()])
    _send_one_of_each(proxy)
    rows = proxy.rows()
    assert [r["api"] for r in rows] == ["chat", "responses", "anthropic"]
    assert all(r["tokens_sent"] <= r["tokens_original"] and not r["failed_open"] for r in rows)
    assert rows[2]["encoding_fallback"] == 1  # Claude: counted with o200k, an estimate
    stats = httpx.get(proxy.url + "/stats").json()
    assert {a["key"]: a["requests"] for a in stats["by_api"]} == {"chat": 1, "responses": 1, "anthropic": 1}
    families = {f.name: f for f in text_string_to_metric_families(httpx.get(proxy.url + "/metrics").text)}
    apis = {s.labels["api"] for s in families["context_engine_requests"].samples if s.name.endswith("_total")}
    assert apis == {"chat", "responses", "anthropic"}
    r = subprocess.run([sys.executable, "-m", "context_engine.proxy.cli", "report", "--ledger", proxy.ledger_path,
                        "--config", "/dev/null", "--by", "api", "--format", "json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert sorted(row["key"] for row in report["rows"]) == ["anthropic", "chat", "responses"]


def test_lone_surrogates_go_out_as_sent(start_proxy, mock):
    proxy = start_proxy(rules=[DropOldAssistant()])
    for path, body in [
        ("/v1/responses", b'{"model":"gpt-4o","input":[{"role":"user","content":"a\\ud800"},'
                          b'{"role":"assistant","content":"x"},{"role":"user","content":"q"}]}'),
        ("/v1/messages", b'{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user",'
                         b'"content":"a\\udfff"},{"role":"assistant","content":"x"},{"role":"user","content":"q"}]}'),
    ]:
        r = httpx.post(proxy.url + path, content=body, headers={"x-api-key": "k"})
        assert r.status_code == 200 and mock.received[-1].body == body
    rows = proxy.rows()  # recorded from a scrubbed copy, never rewritten
    assert [(r["api"], r["status"], r["tokens_sent"] == r["tokens_original"]) for r in rows] == [
        ("responses", 200, True), ("anthropic", 200, True)]
