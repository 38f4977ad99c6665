"""The PostgreSQL ledger: same rows as SQLite, migrated at start-up, durable like it,
read by report and /stats; a bad ledger setting stops start-up naming it."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
import time

import httpx
import psycopg
import pytest

from context_engine.bench.fleet import free_port
from context_engine.proxy.demo.mock_upstream import ServerThread
from context_engine.proxy.edge.app import create_app
from context_engine.proxy.engine.engine import Engine
from context_engine.proxy.recording.ledger import Ledger, LedgerRow, read_rows
from context_engine.proxy.settings import ConfigError, load_settings
from context_engine.proxy.store.stores import MemoryStore
from tests.conftest import REPO


def _rows() -> list[LedgerRow]:
    return [
        LedgerRow(model="gpt-4o", session="s1", tokens_original=900, tokens_sent=400,
                  rule_savings={"fold_duplicates": 500}, journal=[{"rule": "fold_duplicates", "ms": 1.5}],
                  prompt_tokens=400, cached_tokens=128, stream=True, utilization=0.25, ts=1000.5),
        LedgerRow(model="m\udc80\x00x", session="s\ud800", prompt_tokens=10 ** 30,
                  utilization=math.nan, context={"k": [1, "\x00"]}, failed_open=True, ts=1001.0),
    ]


def _write(url: str, rows: list[LedgerRow], **kw) -> Ledger:
    ledger = Ledger(url, replica="r1", **kw)
    for row in rows:
        ledger.record(row)
    assert ledger.flush(10)
    return ledger


def test_postgres_holds_the_rows_sqlite_holds_and_both_read_the_same(pg_ledger, tmp_path):
    sqlite = str(tmp_path / "l.db")
    for url in (sqlite, pg_ledger):
        _write(url, _rows()).close()
    lite, pg = read_rows(sqlite), read_rows(pg_ledger)
    assert len(pg) == 2 and pg[0]["replica"] == "r1"
    for a, b in zip(lite, pg):
        # PostgreSQL text cannot hold NUL: it is stored escaped
        a = {k: v.replace("\x00", "\\u0000") if isinstance(v, str) else v for k, v in a.items()}
        assert a == b
    assert pg[1]["model"] == "m\\udc80\\u0000x" and pg[1]["prompt_tokens"] is None
    assert read_rows(pg_ledger, since=1000.9) == pg[1:]


def test_an_older_table_gains_its_columns_and_replicas_migrate_together(pg_ledger):
    with psycopg.connect(pg_ledger, autocommit=True) as conn:
        conn.execute("CREATE TABLE requests (id BIGSERIAL PRIMARY KEY, ts DOUBLE PRECISION NOT NULL, model TEXT)")
        conn.execute("INSERT INTO requests (ts, model) VALUES (1.0, 'legacy')")
    ledgers: list[Ledger] = []
    starts = [threading.Thread(target=lambda: ledgers.append(Ledger(pg_ledger))) for _ in range(4)]
    for t in starts:
        t.start()
    for t in starts:
        t.join()
    assert len(ledgers) == 4
    for i, ledger in enumerate(ledgers):
        ledger.record(LedgerRow(model=f"new{i}", api="responses"))
        assert ledger.flush(10)
        ledger.close()
    rows = read_rows(pg_ledger)
    assert rows[0]["model"] == "legacy" and rows[0]["api"] is None
    assert sorted(r["model"] for r in rows[1:]) == ["new0", "new1", "new2", "new3"]


def test_a_lost_connection_is_reopened_and_no_row_is_lost_or_written_twice(pg_ledger):
    ledger = _write(pg_ledger, [LedgerRow(model="before")])
    with psycopg.connect(pg_ledger, autocommit=True) as admin:
        killed = admin.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                               "WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchone()
    assert killed and killed[0] >= 1  # the writer's connection is gone
    for i in range(50):
        ledger.record(LedgerRow(model=f"after{i}"))
    assert ledger.flush(20)
    assert [r["model"] for r in read_rows(pg_ledger)] == ["before"] + [f"after{i}" for i in range(50)]
    assert ledger.health() | {"last_error": ""} == {
        "state": "ok", "written": 51, "dropped": 0, "queued": 0, "oldest_s": 0.0,
        "failed_attempts": 0, "last_error": ""}
    ledger.close()


def test_a_row_postgres_refuses_is_dropped_and_counted_and_the_writer_goes_on(pg_ledger):
    ledger = _write(pg_ledger, [LedgerRow(model="first")])
    with psycopg.connect(pg_ledger, autocommit=True) as admin:
        admin.execute("ALTER TABLE requests ADD CONSTRAINT no_bad CHECK (model <> 'bad')")
    for model in ("ok1", "bad", "ok2"):
        ledger.record(LedgerRow(model=model))
    assert ledger.flush(20)
    health = ledger.health()
    assert health["dropped"] == 1 and health["written"] == 3 and "no_bad" in health["last_error"]
    assert [r["model"] for r in read_rows(pg_ledger)] == ["first", "ok1", "ok2"]
    ledger.close()


def test_retention_deletes_old_rows_in_postgres(pg_ledger):
    now = time.time()
    _write(pg_ledger, [LedgerRow(model="old", ts=now - 10 * 86400), LedgerRow(model="new", ts=now)]).close()
    pruning = Ledger(pg_ledger, retention_days=7)
    assert pruning.flush(10) and pruning.pruned == 1
    assert [r["model"] for r in read_rows(pg_ledger)] == ["new"]
    pruning.close()


def test_stats_and_report_read_the_postgres_ledger(mock, pg_ledger):
    settings = load_settings(flags={"rules": "", "store": "memory://", "ledger": pg_ledger,
                                    "upstream": mock.url + "/v1", "replica": "alpha"},
                             env={}, config_path=os.devnull)
    app = create_app(settings, engine=Engine(settings, store=MemoryStore()))
    with ServerThread(app) as server:
        for i in range(3):
            r = httpx.post(server.url + "/v1/chat/completions", json={
                "model": "gpt-4o", "messages": [{"role": "user", "content": f"hello {i}"}]})
            assert r.status_code == 200
        deadline = time.time() + 20
        while time.time() < deadline:
            stats = httpx.get(server.url + "/stats", timeout=30).json()
            if stats["overall"]["requests"] == 3:
                break
        assert stats["overall"]["requests"] == 3 and stats["ledger"]["complete"]
        assert [(t["key"], t["requests"]) for t in stats["by_replica"]] == [("alpha", 3)]
    out = subprocess.run([sys.executable, "-m", "context_engine.proxy.cli", "report", "--config", os.devnull,
                          "--ledger", pg_ledger, "--format", "json", "--by", "replica"],
                         capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["overall"]["requests"] == 3 and [r["key"] for r in data["rows"]] == ["alpha"]


def _serve(*flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "context_engine.proxy.cli", "serve", "--config", os.devnull,
                           "--port", str(free_port()), *flags], capture_output=True, text=True,
                          timeout=60, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_an_unknown_ledger_scheme_stops_start_up_naming_the_setting(tmp_path):
    with pytest.raises(ConfigError, match=r"^ledger: mysql:// is not a ledger"):
        load_settings(flags={"ledger": "mysql://db/ledger"}, env={}, config_path=os.devnull)
    out = _serve("--ledger", "mysql://db/ledger")
    assert out.returncode == 2 and "bad configuration: ledger: mysql://" in out.stderr
    assert not os.path.exists(REPO / "mysql:")


def test_an_unreachable_database_stops_start_up_naming_the_setting(postgres):
    url = f"postgresql://ce:secret@127.0.0.1:{free_port()}/nowhere"
    out = _serve("--ledger", url)
    assert out.returncode == 2, out.stderr
    assert "bad configuration: ledger: cannot connect to postgresql://127.0.0.1" in out.stderr
    assert "secret" not in out.stderr and "Traceback" not in out.stderr
    report = subprocess.run([sys.executable, "-m", "context_engine.proxy.cli", "report", "--config", os.devnull,
                             "--ledger", url], capture_output=True, text=True, cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert report.returncode == 2 and "ledger: cannot connect" in report.stderr


def test_report_on_a_database_no_server_has_written_to_is_empty_and_creates_nothing(pg_ledger):
    assert read_rows(pg_ledger) == []
    with psycopg.connect(pg_ledger) as conn:
        assert conn.execute("SELECT to_regclass('requests')").fetchone() == (None,)


def _feed(ledger: Ledger, stop: threading.Event, sent: list[str]) -> None:
    """Rows as a server under load records them: one every 5 ms until ``stop``."""
    while not stop.is_set():
        sent.append(f"r{len(sent)}")
        ledger.record(LedgerRow(model=sent[-1]))
        time.sleep(0.005)


def test_a_postgres_restart_under_load_loses_no_row_and_health_says_failing_meanwhile():
    from context_engine.bench.fleet import Postgres

    with Postgres() as server:
        url = server.database("outage")
        ledger = _write(url, [LedgerRow(model="before")], stale_after=1.0)
        stop, sent = threading.Event(), list[str]()
        feeder = threading.Thread(target=_feed, args=(ledger, stop, sent))
        feeder.start()
        try:
            time.sleep(0.3)
            server.stop()
            down = time.monotonic()
            health = ledger.health()
            while time.monotonic() - down < 5:  # a 5 s outage
                health = ledger.health()
                time.sleep(0.1)
            assert health["state"] == "failing" and health["oldest_s"] > 1.0, health
            assert health["queued"] > 0 and health["dropped"] == 0
            server.start()
            time.sleep(0.3)
        finally:
            stop.set()
            feeder.join()
        assert ledger.flush(60)
        health = ledger.health()
        assert health["state"] == "ok" and health["dropped"] == 0, health
        rows = [r["model"] for r in read_rows(url)]
        assert rows == ["before"] + sent  # every row, once, in order
        ledger.close()


def test_a_silent_server_shows_as_failing_while_the_writer_waits(pg_ledger):
    """A half-open connection (the server's host gone quiet): the writer blocks in a
    statement; health says failing by the age of the oldest row, and the rows are
    written once the database answers again."""
    ledger = _write(pg_ledger, [LedgerRow(model="before")], stale_after=0.5)
    with psycopg.connect(pg_ledger, autocommit=True) as admin:
        admin.execute("BEGIN")
        admin.execute("LOCK TABLE requests IN ACCESS EXCLUSIVE MODE")  # inserts wait
        ledger.record(LedgerRow(model="waiting"))
        time.sleep(1.5)
        health = ledger.health()
        assert health["state"] == "failing" and health["queued"] == 1, health
        assert "waited" in health["last_error"]
        admin.execute("ROLLBACK")
    assert ledger.flush(30)
    assert ledger.health()["state"] == "ok"
    assert [r["model"] for r in read_rows(pg_ledger)] == ["before", "waiting"]
    ledger.close()
