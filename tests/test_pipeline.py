"""The pipeline: journal, the rule guard, the invariant check, determinism."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import httpx
import pytest

from context_engine.proxy.engine.context import RequestContext
from context_engine.proxy.engine.pipeline import Pipeline
from context_engine.proxy.engine.tokens import TokenCounter
from tests.fakes.rules import BreaksLastUser, DropOldAssistant, Raises

MSGS = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "first question about the weather in Lisbon"},
    {"role": "assistant", "content": "It is sunny in Lisbon, 24 degrees and a light breeze."},
    {"role": "user", "content": "and tomorrow?"},
]


def run(rules, messages=MSGS):
    pipeline = Pipeline(rules)
    result = asyncio.run(pipeline.run(RequestContext(messages=messages, model="gpt-4o"),
                                      TokenCounter()))
    return pipeline, result


def test_journal_records_each_rule_tokens_and_time():
    _, result = run([DropOldAssistant()])
    (entry,) = result.journal
    assert entry.rule == "drop_old_assistant" and entry.saved > 10 and entry.ms >= 0
    assert result.tokens_after == result.tokens_before - entry.saved
    assert [m["content"] for m in result.ctx.messages][2] == "…"


def test_a_raising_rule_is_skipped_and_counted():
    pipeline, result = run([Raises(), DropOldAssistant(), Raises()])
    assert pipeline.stats.rule_failures["raises"] == 2
    assert [j.error != "" for j in result.journal] == [True, False, True]
    assert result.ctx.messages[2]["content"] == "…"  # the working rule still applied
    assert not result.failed_open


def test_a_rewrite_that_breaks_invariants_sends_the_original():
    pipeline, result = run([DropOldAssistant(), BreaksLastUser()])
    assert result.failed_open and result.ctx.messages is MSGS
    assert result.tokens_after == result.tokens_before
    assert pipeline.stats.invariant_failures == 1
    assert any("last user turn" in p for p in result.problems)


def test_raising_rule_through_the_server_still_answers(start_proxy, mock):
    proxy = start_proxy(rules=[Raises()])
    r = httpx.post(proxy.url + "/v1/chat/completions", json={"model": "gpt-4o", "messages": MSGS})
    assert r.status_code == 200
    assert mock.received[-1].json()["messages"] == MSGS
    row = proxy.rows()[-1]
    assert row["rule_errors"] == 1 and json.loads(row["journal"])[0]["error"]
    assert httpx.get(proxy.url + "/healthz").json()["rule_failures"] == {"raises": 1}


def test_failed_open_is_in_the_ledger(start_proxy, mock):
    proxy = start_proxy(rules=[BreaksLastUser()])
    httpx.post(proxy.url + "/v1/chat/completions", json={"model": "gpt-4o", "messages": MSGS})
    assert mock.received[-1].json()["messages"] == MSGS
    assert proxy.rows()[-1]["failed_open"] == 1


SCRIPT = """
import asyncio, json, sys
sys.path.insert(0, ".")
from context_engine.proxy.dialects.chat.body import parse_body, splice
from context_engine.proxy.engine.engine import Engine
from context_engine.proxy.settings import load_settings
raw = sys.stdin.buffer.read()
body = parse_body(raw)
engine = Engine(load_settings(flags={"store": "memory://"}, env={}, config_path="/dev/null"))
res = asyncio.run(engine.rewrite(body.data, "session-1")).result
assert res.changed and not res.failed_open
sys.stdout.buffer.write(splice(body, res.ctx.messages))
"""


@pytest.mark.slow
def test_default_rewrites_are_byte_identical_across_processes():
    from context_engine.proxy.demo.conversation import TOOLS, conversation

    body = json.dumps({"model": "gpt-4o", "messages": conversation(), "tools": TOOLS},
                      ensure_ascii=False).encode()
    outs = {subprocess.run([sys.executable, "-c", SCRIPT], input=body, capture_output=True,
                           check=True, env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"}).stdout
            for seed in ("1", "2", "3")}
    assert len(outs) == 1
    (out,) = outs
    assert out != body and json.loads(out)["messages"][-1] == conversation()[-1]
