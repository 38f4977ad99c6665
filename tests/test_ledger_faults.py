"""The ledger never dies and never lies: bad values, failed writes, a dead writer."""

from __future__ import annotations

import time

import httpx

SURROGATE_MODEL = b'{"model": "\\ud800", "messages": [{"role": "user", "content": "hi"}]}'


def test_surrogate_in_model_leaves_the_ledger_writing(start_proxy):
    proxy = start_proxy()
    r = httpx.post(proxy.url + "/v1/chat/completions", content=SURROGATE_MODEL,
                   headers={"content-type": "application/json"})
    assert r.headers["x-context-engine-tokens-before"]  # relayed from the upstream, whatever it said
    assert r.status_code == 200 and r.json()["model"] == "\ud800"  # the mock echoes it, escaped
    reply = proxy.client().chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "after the bad one"}])
    assert reply.choices[0].message.content
    rows = proxy.rows()
    # the chat edge records a scrubbed copy (U+FFFD); the ledger itself would escape it
    assert [row["model"] for row in rows] in (["\ufffd", "gpt-4o"], ["\\ud800", "gpt-4o"])
    metrics = httpx.get(proxy.url + "/metrics")
    assert metrics.status_code == 200
    assert 'model="gpt-4o"' in metrics.text
    assert httpx.get(proxy.url + "/healthz").json()["status"] == "ok"
    start = time.perf_counter()
    stats = httpx.get(proxy.url + "/stats", timeout=30)
    assert stats.status_code == 200 and stats.json()["overall"]["requests"] == 2
    assert time.perf_counter() - start < 4.0  # it took 10 s when the writer had died


# --- the writer, on a real SQLite file ---------------------------------------------------

import math  # noqa: E402
import os  # noqa: E402
import sqlite3  # noqa: E402

from context_engine.proxy.recording.ledger import Ledger, LedgerRow, read_rows  # noqa: E402


def test_values_sqlite_cannot_take_are_cleaned_not_fatal(tmp_path):
    path = str(tmp_path / "l.db")
    ledger = Ledger(path)
    ledger.record(LedgerRow(model="m\udc80x", prompt_tokens=10 ** 30, utilization=math.nan,
                            session="s\ud800", journal=[{"rule": "r\ud83d", "note": object()}],
                            context={"k\udfff": [1.5, "\ud800"]}, finish_reason="stop"))
    ledger.record(LedgerRow(model="gpt-4o"))
    assert ledger.flush(5)
    rows = read_rows(path)
    assert [r["model"] for r in rows] == ["m\\udc80x", "gpt-4o"]
    assert rows[0]["prompt_tokens"] is None and rows[0]["utilization"] is None
    assert rows[0]["session"] == "s\\ud800" and "r\\ud83d" in rows[0]["journal"]
    assert ledger.health()["state"] == "ok" and ledger.health()["dropped"] == 0
    ledger.close()


def test_a_failed_write_is_retried_then_dropped_and_counted_and_the_writer_goes_on(tmp_path):
    path = str(tmp_path / "l.db")
    ledger = Ledger(path, busy_timeout=0.02)
    ledger.record(LedgerRow(model="first"))
    assert ledger.flush(5)
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")  # another writer holds the database
    ledger.record(LedgerRow(model="while locked"))
    assert ledger.flush(10)
    health = ledger.health()
    assert health["state"] == "failing" and health["dropped"] == 1
    assert health["failed_attempts"] >= 3 and "locked" in health["last_error"]
    blocker.execute("ROLLBACK")
    blocker.close()
    ledger.record(LedgerRow(model="after"))
    assert ledger.flush(5)
    assert [r["model"] for r in read_rows(path)] == ["first", "after"]
    assert ledger.health()["state"] == "ok" and ledger.health()["written"] == 2
    ledger.close()


def test_a_full_queue_drops_and_counts(tmp_path):
    path = str(tmp_path / "l.db")
    ledger = Ledger(path, max_queue=2, busy_timeout=5)
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")  # the writer waits on its first batch
    for i in range(10):
        ledger.record(LedgerRow(model=f"m{i}"))
    blocker.execute("ROLLBACK")
    blocker.close()
    assert ledger.flush(10)
    written, dropped = ledger.health()["written"], ledger.health()["dropped"]
    assert written + dropped == 10 and dropped >= 7
    assert len(read_rows(path)) == written
    ledger.close()


def test_retention_deletes_old_rows_at_start_up_and_periodically(tmp_path):
    path = str(tmp_path / "l.db")
    keep = Ledger(path)  # 0 = keep forever
    now = time.time()
    keep.record(LedgerRow(model="old", ts=now - 10 * 86400))
    keep.record(LedgerRow(model="recent", ts=now - 86400))
    keep.close()
    assert len(read_rows(path)) == 2
    pruning = Ledger(path, retention_days=7, prune_every=0.05)
    assert pruning.flush(5)
    assert [r["model"] for r in read_rows(path)] == ["recent"]
    pruning.record(LedgerRow(model="aged", ts=now - 8 * 86400))  # written, then pruned later
    assert pruning.flush(5) and pruning.health()["written"] == 1
    deadline = time.time() + 10
    while time.time() < deadline and pruning.pruned < 2:
        time.sleep(0.05)
    assert pruning.pruned == 2
    assert [r["model"] for r in read_rows(path)] == ["recent"]
    pruning.close()


def test_an_older_ledger_gains_new_columns(tmp_path):
    path = str(tmp_path / "old.db")
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE requests (id INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL, model TEXT)")
    conn.execute("INSERT INTO requests (ts, model) VALUES (1.0, 'legacy')")
    conn.commit()
    conn.close()
    ledger = Ledger(path)
    ledger.record(LedgerRow(model="new", context={"a": 1}))
    assert ledger.flush(5)
    rows = read_rows(path)
    assert [r["model"] for r in rows] == ["legacy", "new"] and rows[1]["context"] == '{"a": 1}'
    ledger.close()
    assert os.path.exists(path)


# --- what the server says about it --------------------------------------------------------

from context_engine.proxy.demo.mock_upstream import ServerThread  # noqa: E402
from context_engine.proxy.edge.app import create_app  # noqa: E402
from context_engine.proxy.engine.engine import Engine  # noqa: E402
from context_engine.proxy.recording.metrics import MAX_LABEL_VALUES, Metrics  # noqa: E402
from context_engine.proxy.settings import load_settings  # noqa: E402
from context_engine.proxy.store.stores import MemoryStore  # noqa: E402


def _serve(mock, ledger):
    settings = load_settings(flags={"rules": "", "store": "memory://", "ledger": ledger.path,
                                    "upstream": mock.url + "/v1"}, env={}, config_path=os.devnull)
    return ServerThread(create_app(settings, engine=Engine(settings, store=MemoryStore()), ledger=ledger))


def _chat(url, model="gpt-4o"):
    from openai import OpenAI

    client = OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0)
    return client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])


def test_healthz_says_degraded_while_ledger_writes_fail_and_stats_does_not_wait(mock, tmp_path):
    path = str(tmp_path / "l.db")
    ledger = Ledger(path, busy_timeout=4.0)
    with _serve(mock, ledger) as server:
        _chat(server.url)
        assert httpx.get(server.url + "/healthz").json()["status"] == "ok"
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN EXCLUSIVE")
        assert _chat(server.url).choices[0].message.content  # requests still go through
        start = time.perf_counter()
        stats = httpx.get(server.url + "/stats", timeout=30).json()
        assert time.perf_counter() - start < 4.0  # the writer is stuck for > 12 s
        assert stats["ledger"]["complete"] is False
        deadline = time.time() + 20
        while time.time() < deadline:
            health = httpx.get(server.url + "/healthz").json()
            if health["status"] == "degraded":
                break
            time.sleep(0.05)
        assert health["status"] == "degraded", health
        assert "ledger writes are failing" in health["reasons"][0]
        metrics = httpx.get(server.url + "/metrics").text
        assert "context_engine_ledger_writer_up 0.0" in metrics
        blocker.execute("ROLLBACK")
        blocker.close()
        _chat(server.url)
        deadline = time.time() + 30  # the row is recorded once the response is finished
        while ledger.written + ledger.dropped < 3 and time.time() < deadline:
            ledger.flush(1)
        health = httpx.get(server.url + "/healthz").json()
        written, dropped = health["ledger"]["written"], health["ledger"]["dropped"]
        assert health["status"] == "ok" and written + dropped == 3  # the locked row: retried or counted
        assert f"context_engine_ledger_dropped_rows {float(dropped)}" in httpx.get(server.url + "/metrics").text
        assert len(read_rows(path)) == written


def test_metrics_labels_are_cleaned_and_bounded_in_number():
    metrics = Metrics()
    for i in range(MAX_LABEL_VALUES + 50):
        metrics.observe(LedgerRow(model=f"model-{i}", status=200, tokens_original=5, tokens_sent=4,
                                  rule_savings={f"rule-{i}": 1}, cached_tokens=-3))
    metrics.observe(LedgerRow(model="\ud800" + "x" * 500, status=200))
    text = metrics.render().decode()
    models = {line.split('model="')[1].split('"')[0] for line in text.splitlines()
              if line.startswith("context_engine_requests_total{")}
    assert len(models) == MAX_LABEL_VALUES + 1 and "other" in models
    assert 'model="other"' in text and "\\ud800" not in models
    assert 'context_engine_requests_total{api="chat",arm="rewrite",model="other",status="200"} 51.0' in text
    rules = [line for line in text.splitlines() if line.startswith("context_engine_rule_saved_tokens_total{")]
    assert len(rules) == MAX_LABEL_VALUES + 1


def test_a_stopped_writer_is_reported_and_stats_still_answers(mock, tmp_path):
    ledger = Ledger(str(tmp_path / "l.db"))
    with _serve(mock, ledger) as server:
        _chat(server.url)
        deadline = time.time() + 20  # the row is recorded once the response is finished
        while ledger.written < 1 and time.time() < deadline:
            ledger.flush(1)
        ledger._queue.put(None)  # the writer thread ends while the server runs on
        ledger._thread.join(5)
        _chat(server.url)
        health = httpx.get(server.url + "/healthz").json()
        assert health["status"] == "degraded" and health["ledger"]["state"] == "dead"
        assert health["reasons"] == ["ledger writer is not running: rows are not being recorded"]
        start = time.perf_counter()
        stats = httpx.get(server.url + "/stats", timeout=30).json()
        assert time.perf_counter() - start < 4.0
        assert stats["overall"]["requests"] == 1 and stats["ledger"]["complete"] is False
        assert httpx.get(server.url + "/metrics").status_code == 200


def test_ledger_retention_days_is_a_setting_the_server_applies(mock, tmp_path):
    import pytest

    from context_engine.proxy.settings import ConfigError

    path = str(tmp_path / "l.db")
    old = Ledger(path)
    old.record(LedgerRow(model="last month", ts=time.time() - 31 * 86400))
    old.record(LedgerRow(model="yesterday", ts=time.time() - 86400))
    old.close()
    settings = load_settings(flags={"rules": "", "store": "memory://", "ledger": path,
                                    "upstream": mock.url + "/v1"},
                             env={"CONTEXT_ENGINE_LEDGER_RETENTION_DAYS": "30"}, config_path=os.devnull)
    assert settings.ledger_retention_days == 30
    app = create_app(settings, engine=Engine(settings, store=MemoryStore()))
    assert app.state.ledger.flush(10)
    assert [r["model"] for r in read_rows(path)] == ["yesterday"]
    app.state.ledger.close()
    with pytest.raises(ConfigError, match="ledger_retention_days"):
        load_settings(flags={"ledger_retention_days": -1}, env={}, config_path=os.devnull)
