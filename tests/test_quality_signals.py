"""Behaviour signals through a real proxy: a file view ``compact`` cleared and read again is
a re-read of ``compact`` (tokens, turns); a repeat read of a result sent whole is the base
rate; a ``context_recall`` call is counted; format errors and 4xx after a rewrite are
flagged; ``report --quality`` and ``/metrics`` show them."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from context_engine.proxy.demo.mock_upstream import ServerThread
from context_engine.proxy.recording.ledger import COLUMNS, connect
from context_engine.proxy.reporting import quality, quality_render
from tests.fakes.recall_upstream import RecallUpstream
from tests.test_recall import TOOLS, history, recall_proxies

COMPACT = {"compact": {"trigger_tokens": 1500, "clear_at_least": 300, "keep_recent": 2,
                       "keep_prose": 2, "min_item_tokens": 20}}
TASK = "Fix the bug in parser.py."


def view(i: int) -> str:
    return "\n".join(f"src/module_{i}.py:{n}: value_{i}_{n} = compute({n}, 'field_{n}')" for n in range(40))


def call(cid: str, command: str, text: str = "") -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": text or f"I run {command}.", "tool_calls": [
                {"id": cid, "type": "function", "function": {
                    "name": "bash", "arguments": json.dumps({"command": command})}}]}]


def session(steps: int, task: str = TASK) -> list[dict[str, Any]]:
    """An agent that ``cat``s ``steps`` files, one a turn."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                  {"role": "user", "content": task}]
    for i in range(steps):
        msgs += call(f"call_{i}", f"cat src/module_{i}.py")
        msgs.append({"role": "tool", "tool_call_id": f"call_{i}", "content": view(i)})
    return msgs


def again(msgs: list[dict[str, Any]], i: int, cid: str = "again") -> list[dict[str, Any]]:
    """The agent runs ``cat`` of file ``i`` again."""
    return msgs + call(cid, f"cat src/module_{i}.py") + [
        {"role": "tool", "tool_call_id": cid, "content": view(i)}]


def post(p: Any, messages: list[dict[str, Any]], model: str = "gpt-4o-mini") -> httpx.Response:
    return httpx.post(p.url + "/v1/chat/completions", headers={"authorization": "Bearer sk-test"},
                      json={"model": model, "messages": messages}, timeout=30)


def test_a_file_view_compact_cleared_and_read_again_is_a_reread_of_compact(start_proxy, mock):
    p = start_proxy(enabled="compact", rule_options=COMPACT)
    assert post(p, session(12)).status_code == 200  # an epoch clears the first views
    first = len(mock.received)
    assert post(p, again(session(12), 0)).status_code == 200  # the agent cats file 0 again
    sent = json.loads(mock.received[first].body)["messages"]
    assert "[context-engine:cleared]" in sent[3]["content"]  # the first cat went out cleared
    row = p.rows()[-1]
    assert row["rereads"] == 1 and row["repeat_reads"] == 0
    assert json.loads(row["reread_rules"]) == {"compact": [1, row["reread_tokens"]]}
    assert 500 < row["reread_tokens"] < 2000
    assert row["reread_turns"] == 12  # the first cat, eleven more, then this one
    metrics = httpx.get(p.url + "/metrics").text
    assert 'context_engine_rereads_total{rule="compact"} 1.0' in metrics
    assert f'context_engine_reread_tokens_total{{rule="compact"}} {float(row["reread_tokens"])}' in metrics


def test_a_repeat_read_of_a_result_sent_whole_is_the_base_rate(start_proxy):
    p = start_proxy(enabled="compact", rule_options=COMPACT)
    assert post(p, again(session(2, "Another task."), 1)).status_code == 200  # below the trigger
    row = p.rows()[-1]
    assert row["rereads"] == 0 and row["repeat_reads"] == 1 and row["repeat_read_tokens"] > 500
    assert json.loads(row["reread_rules"]) == {}
    assert "context_engine_repeat_reads_total 1.0" in httpx.get(p.url + "/metrics").text


def test_without_rules_every_repeat_read_is_the_base_rate(start_proxy):
    p = start_proxy()
    post(p, again(session(12, "A third task."), 0))
    row = p.rows()[-1]
    assert (row["rereads"], row["repeat_reads"]) == (0, 1)


def test_a_recall_call_is_counted_with_what_it_brought_back(tmp_path):
    with RecallUpstream() as up, recall_proxies(up.url, tmp_path) as start:
        p = start()
        r = httpx.post(p.url + "/v1/chat/completions", headers={"authorization": "Bearer k"},
                       json={"model": "recall-id", "messages": history(), "tools": TOOLS}, timeout=30)
        assert r.status_code == 200
        row = p.rows()[-1]
        assert row["recall_calls"] == 1 and row["recall_rounds"] == 1
        assert row["recall_tokens"] > 1000  # the 200 sensor lines came back
        metrics = httpx.get(p.url + "/metrics").text
        assert "context_engine_recall_calls_total 1.0" in metrics


def test_a_tool_call_format_error_after_a_rewritten_request_is_flagged(start_proxy):
    p = start_proxy(enabled="compact", rule_options=COMPACT)
    msgs = session(12, "A fourth task.")
    post(p, msgs)
    msgs = msgs + call("bad", "cat") + [{"role": "tool", "tool_call_id": "bad",
                                          "content": "Error: InputValidationError: invalid arguments"}]
    post(p, msgs)
    rows = p.rows()
    assert rows[-2]["tokens_sent"] < rows[-2]["tokens_original"]  # the request before was rewritten
    assert rows[-1]["format_errors"] == 1 and rows[-2]["format_errors"] == 0
    data = quality.build(rows, "agent")
    assert data["overall"]["format_errors_after_rewrite"] == 1


def refusing_upstream() -> Starlette:
    async def chat(request: Request) -> JSONResponse:
        return JSONResponse({"error": {"message": "messages.3: tool_call_id not found", "type":
                                       "invalid_request_error"}}, status_code=400)

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def test_a_4xx_to_a_request_the_rules_changed_is_flagged_with_its_text(start_proxy):
    with ServerThread(refusing_upstream()) as up:
        p = start_proxy(enabled="compact", rule_options=COMPACT, upstream=up.url + "/v1")
        assert post(p, session(12, "A fifth task.")).status_code == 400
        assert post(p, session(1, "Small.")).status_code == 400  # unchanged: not the rewrite's
        changed, unchanged = p.rows()[-2:]
        assert changed["rewrite_error"] == 1 and unchanged["rewrite_error"] == 0
        data = quality.build(p.rows(), "rule")
        assert data["rewrite_errors"][0]["error"].endswith("tool_call_id not found")
        assert "context_engine_rewrite_errors_total 1.0" in httpx.get(p.url + "/metrics").text


def test_report_quality_shows_rereads_by_rule_against_what_the_rule_saved(
        start_proxy, tmp_path):
    p = start_proxy(enabled="compact", rule_options=COMPACT)
    msgs = session(12, "A sixth task.")
    post(p, msgs)  # compact clears …
    msgs = again(msgs, 0)
    post(p, msgs)  # … then the agent reads file 0 again …
    for k in range(1, 4):  # … and again: each re-read rides along on every later request
        msgs = again(msgs, k, f"again{k}")
        post(p, msgs)
    rows = p.rows()
    data = quality.build(rows, "rule")
    compact = next(r for r in data["rows"] if r["key"] == "compact")
    assert compact["rereads"] == sum(r["rereads"] for r in rows) == 4
    assert compact["tokens_saved"] > 0
    text = " ".join(str(x) for x in quality_render.render(data))
    assert "re-reads of results the proxy cleared or shortened" in text
    out = subprocess.run([sys.executable, "-m", "context_engine.proxy.cli", "report", "--quality",
                          "--by", "rule", "--format", "json", "--ledger", p.ledger_path],
                         capture_output=True, text=True, env={**os.environ, "CONTEXT_ENGINE_CONFIG": os.devnull},
                         cwd=tmp_path, timeout=60)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["overall"]["rereads"] == compact["rereads"]
    table = subprocess.run([sys.executable, "-m", "context_engine.proxy.cli", "report", "--quality",
                            "--by", "day", "--ledger", p.ledger_path], capture_output=True, text=True,
                           cwd=tmp_path, timeout=60)
    assert table.returncode == 0 and "what the rewrite costs the agent, by day" in table.stdout
    assert "re-reads of results the proxy cleared or shortened: 4" in table.stdout


def test_the_flag_names_the_rule_and_both_numbers():
    """Priced like the bill: a re-read enters once, then rides along on each later request."""
    rows = [{"session": "s", "model": "gpt-4o", "arm": "rewrite", "ts": float(i),
             "rule_savings": json.dumps({"compact": 100 if i == 0 else 0}),
             "reread_rules": json.dumps({"compact": [1, 2000]} if i == 1 else {})} for i in range(6)]
    (flag,) = quality.build(rows, "rule")["flags"]
    assert flag["rule"] == "compact" and flag["unit"] == "USD"
    assert flag["reread_cost"] > flag["saving"] > 0
    rows[0]["rule_savings"] = json.dumps({"compact": 10**6})
    assert quality.build(rows, "rule")["flags"] == []


def test_a_ledger_from_before_gains_the_signal_columns(tmp_path):
    path = str(tmp_path / "old.db")
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE requests (id INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL, session TEXT)")
    conn.commit()
    conn.close()
    have = {r[1] for r in connect(path).execute("PRAGMA table_info(requests)")}
    assert {"rereads", "reread_tokens", "reread_rules", "repeat_reads", "recall_calls",
            "format_errors", "rewrite_error", "user_turn", "guard"} <= have and set(COLUMNS) <= have


def test_sessions_end_by_their_last_reply():
    def rows(*finishes: str, status: int = 200, ts: float = 0.0) -> list[dict[str, Any]]:
        return [{"session": "s", "finish_reason": f, "status": status, "ts": ts,
                 "tokens_original": 1000} for f in finishes]

    assert quality.end_of(rows("tool_calls", "stop"), 0) == "stop"
    assert quality.end_of(rows("tool_use", "end_turn"), 0) == "stop"
    assert quality.end_of(rows("tool_calls", status=400), 0) == "error"
    assert quality.end_of(rows("tool_calls"), now=10_000) == "abandoned"
    assert quality.end_of(rows("tool_calls"), now=10) == "open"
    shrunk = rows("tool_use", "end_turn")
    shrunk[-1]["tokens_original"] = 100
    assert quality.end_of(shrunk, 0) == "compaction"


def test_signal_columns_and_guard_notes_read_back_alike_from_sqlite_and_postgres(pg_ledger, tmp_path):
    from context_engine.proxy.recording.ledger import Ledger, LedgerRow, read_rows

    for url in (str(tmp_path / "l.db"), pg_ledger):
        ledger = Ledger(url)
        ledger.record(LedgerRow(session="s", rereads=1, reread_tokens=900, reread_turns=4,
                                reread_rules={"compact": [1, 900]}, repeat_reads=2, recall_calls=1,
                                recall_tokens=50, format_errors=1, user_turn=True, rewrite_error=True))
        ledger.record(LedgerRow(mode="ab", arm="guard", guard=json.dumps({"rule": "compact"})))
        ledger.flush()
        ledger.close()
        (row,) = read_rows(url)
        assert (row["rereads"], row["reread_tokens"], row["reread_turns"], row["repeat_reads"]) == (1, 900, 4, 2)
        assert json.loads(row["reread_rules"]) == {"compact": [1, 900]}
        assert (row["recall_calls"], row["recall_tokens"], row["format_errors"]) == (1, 50, 1)
        assert row["user_turn"] and row["rewrite_error"]
        (note,) = read_rows(url, notes=True)
        assert json.loads(note["guard"]) == {"rule": "compact"}


def test_the_error_text_is_the_providers_message_clipped_and_never_binary():
    from context_engine.proxy.transport.error_text import MAX_CHARS, error_text

    assert error_text(b'{"error": {"message": "bad"}}', 200) == ""
    assert error_text(b'{"error": {"message": "messages.3: bad"}}', 400) == "upstream 400: messages.3: bad"
    assert error_text(b'{"type": "error", "error": {"type": "x", "message": "m"}}', 413) == "upstream 413: m"
    assert error_text(b'{"error": "plain"}', 422) == "upstream 422: plain"
    assert len(error_text(b'{"error": {"message": "' + b"x" * 5000 + b'"}}', 400)) == MAX_CHARS
    assert error_text(b"\x1f\x8b\x08\x00\xff\xfe", 400) == "upstream 400"  # gzip bytes
