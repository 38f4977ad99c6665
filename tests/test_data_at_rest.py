"""Data at rest: what the proxy writes is its user's alone (0700 folders, 0600 files), the
store forgets after ``store_ttl_days``, the ledger after ``ledger_retention_days``, and a
ledger row cannot be made megabytes long through its path."""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
import time
from pathlib import Path

import httpx
import pytest

from context_engine.proxy.demo.mock_upstream import ServerThread
from context_engine.proxy.edge.app import create_app
from context_engine.proxy.recording.ledger import MAX_PATH, Ledger, LedgerRow, read_rows
from context_engine.proxy.settings import load_settings
from context_engine.proxy.store.stores import MemoryStore, open_store


@pytest.fixture
def loose_umask():
    """The usual umask of a library user (022): what the proxy makes must be tight anyway."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def _modes(root: Path) -> dict[str, int]:
    out = {str(root): stat.S_IMODE(root.stat().st_mode)}
    for path in root.rglob("*"):
        out[str(path)] = stat.S_IMODE(path.stat().st_mode)
    return out


def _assert_private(root: Path) -> None:
    modes = _modes(root)
    loose = {p: oct(m) for p, m in modes.items() if m & 0o077}
    assert not loose, f"readable by others: {loose}"
    for path, mode in modes.items():
        assert mode == (0o700 if os.path.isdir(path) else 0o600), (path, oct(mode))


def _settings(tmp_path: Path, mock, **flags):
    state = tmp_path / ".context-engine"
    base = {"ledger": str(state / "ledger.db"), "store": str(state / "store"),
            "upstream": mock.url + "/v1", "rules": "tool_json"}
    return load_settings(flags=base | flags, env={}, config_path=os.devnull)


def _tool_turn(n: int) -> dict:
    rows = ", ".join(f'{{"id": "R{i}", "seat": null, "note": ""}}' for i in range(n))
    return {"model": "gpt-4o", "messages": [
        {"role": "user", "content": "list rows"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "rows", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"rows": [' + rows + "]}"},
        {"role": "user", "content": "which is first?"}]}


def test_a_serving_proxy_writes_its_ledger_and_store_owner_only(mock, tmp_path, loose_umask):
    settings = _settings(tmp_path, mock)
    app = create_app(settings)
    with ServerThread(app) as server:  # real uvicorn on loopback
        r = httpx.post(server.url + "/v1/chat/completions", json=_tool_turn(2000),
                       headers={"authorization": "Bearer sk-a"}, timeout=30)
        assert r.status_code == 200
        app.state.engine.store.set("big", os.urandom(100_000))  # a value file of its own
        assert app.state.ledger.flush(10)
        state = tmp_path / ".context-engine"
        _assert_private(state)
        names = {p.name for p in state.rglob("*")}
    assert {"ledger.db", "ledger.db-wal", "cache.db", "cache.db-wal", "scopes.db"} <= names, names
    assert any(n.endswith(".val") for n in names), names  # value files were checked too
    assert read_rows(str(state / "ledger.db"))


def test_files_an_older_version_left_readable_are_tightened_once(tmp_path, loose_umask, caplog):
    state = tmp_path / ".context-engine"
    state.mkdir(mode=0o755)
    path = state / "ledger.db"
    sqlite3.connect(path).close()
    os.chmod(path, 0o644)
    store = state / "store"
    open_store(str(store)).set("k", b"v")
    for p in [store, *store.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    with caplog.at_level(logging.WARNING, "context_engine.files"):
        Ledger(str(path)).close()
        open_store(str(store)).get("k")
    _assert_private(state)
    assert any("ledger.db was readable by others" in r.message for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, "context_engine.files"):
        Ledger(str(path)).close()
    assert not caplog.records  # nothing loose any more: nothing said


def test_a_ledger_in_a_folder_of_the_users_leaves_that_folder_alone(tmp_path, loose_umask):
    shared = tmp_path / "project"
    shared.mkdir(mode=0o755)
    Ledger(str(shared / "sub" / "ledger.db")).close()
    assert stat.S_IMODE(shared.stat().st_mode) == 0o755  # not ours: untouched
    _assert_private(shared / "sub")


def test_a_disk_store_key_expires_after_its_ttl_and_is_culled(tmp_path):
    store = open_store(str(tmp_path / "store"), ttl_s=0.05)
    store.set("orig:gone", b"x" * 100)
    store.set("orig:big", os.urandom(50_000))
    assert store.get("orig:gone") == b"x" * 100
    time.sleep(0.2)
    assert store.get("orig:gone") is None and store.get("orig:big") is None
    store.close()  # type: ignore[attr-defined]
    reopened = open_store(str(tmp_path / "store"), ttl_s=0.05)
    assert reopened.keys_matching("orig:*") == []  # type: ignore[attr-defined]
    vals = list((tmp_path / "store").rglob("*.val"))
    assert vals == []  # the big value's file went with it
    kept = open_store(str(tmp_path / "kept"), ttl_s=0)
    kept.set("k", b"v")
    time.sleep(0.1)
    assert kept.get("k") == b"v"


def test_a_memory_store_key_expires_after_its_ttl():
    now = [1000.0]
    store = MemoryStore(ttl_s=60, clock=lambda: now[0])
    store.set("a", b"1")
    store.set("b", b"2")
    now[0] += 30
    assert store.get("a") == b"1"
    now[0] += 31
    assert store.get("a") is None and store.get("b") is None
    assert store.held_bytes == 0


def test_the_store_ttl_applies_to_every_store_by_default(tmp_path):
    settings = load_settings(flags={"store": str(tmp_path / "s")}, env={}, config_path=os.devnull)
    assert settings.store_ttl_days == 30
    assert "every store" in type(settings).__dataclass_fields__["store_ttl_days"].metadata["help"]


def test_ledger_rows_past_the_default_retention_are_deleted_at_start_up(mock, tmp_path):
    settings = _settings(tmp_path, mock, rules="")
    assert settings.ledger_retention_days == 90
    old = Ledger(settings.ledger)
    old.record(LedgerRow(model="last year", ts=time.time() - 365 * 86400))
    old.record(LedgerRow(model="last month", ts=time.time() - 30 * 86400))
    old.close()
    app = create_app(settings, engine=None)
    assert app.state.ledger.flush(10)
    assert [r["model"] for r in read_rows(settings.ledger)] == ["last month"]
    app.state.ledger.close()


def test_ledger_retention_runs_periodically_not_only_at_start_up(tmp_path):
    path = str(tmp_path / "l.db")
    ledger = Ledger(path, retention_days=1, prune_every=0.05)
    ledger.record(LedgerRow(model="now"))
    assert ledger.flush(5)
    ledger.record(LedgerRow(model="two days ago", ts=time.time() - 2 * 86400))
    assert ledger.flush(5)
    deadline = time.monotonic() + 10
    while len(read_rows(path)) > 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [r["model"] for r in read_rows(path)] == ["now"]
    ledger.close()


def test_a_megabyte_path_is_clipped_in_the_sqlite_ledger(tmp_path):
    path = str(tmp_path / "l.db")
    ledger = Ledger(path)
    ledger.record(LedgerRow(path="/v1/" + "a" * 1_000_000))
    assert ledger.flush(5)
    ledger.close()
    (row,) = read_rows(path)
    assert len(row["path"]) == MAX_PATH and row["path"].startswith("/v1/aaa")
    assert os.path.getsize(path) < 200_000


def test_a_megabyte_path_is_clipped_in_the_postgres_ledger(pg_ledger):
    ledger = Ledger(pg_ledger)
    ledger.record(LedgerRow(path="/v1/" + "a" * 1_000_000))
    assert ledger.flush(10)
    ledger.close()
    (row,) = read_rows(pg_ledger)
    assert len(row["path"]) == MAX_PATH


def test_the_serve_command_runs_owner_only_whatever_umask_it_was_started_with(mock, tmp_path, loose_umask):
    import signal
    import socket
    import subprocess
    import sys

    from tests.conftest import REPO

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONTEXT_ENGINE_")}
    proc = subprocess.Popen(  # started with umask 022 (the fixture): it must set its own
        [sys.executable, "-m", "context_engine.proxy.cli", "serve", "--port", str(port), "--rules", "tool_json",
         "--config", os.devnull, "--upstream", mock.url + "/v1"],
        cwd=tmp_path, env={**env, "PYTHONPATH": str(REPO)}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=_tool_turn(2000), timeout=30,
                       headers={"authorization": "Bearer sk-a"})
        assert r.status_code == 200
        status = Path(f"/proc/{proc.pid}/status").read_text()
        assert "Umask:\t0077" in status
        _assert_private(tmp_path / ".context-engine")  # the defaults: ledger and store in it
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    _assert_private(tmp_path / ".context-engine")


def test_a_store_pointed_at_a_folder_of_the_users_leaves_its_other_files_alone(tmp_path, loose_umask):
    mine = tmp_path / "notes"
    mine.mkdir(mode=0o755)
    (mine / "todo.txt").write_text("x")
    os.chmod(mine / "todo.txt", 0o644)
    store = open_store(str(mine))
    store.set("k", b"v" * 50_000)
    assert stat.S_IMODE((mine / "todo.txt").stat().st_mode) == 0o644
    assert stat.S_IMODE(mine.stat().st_mode) == 0o755
    ours = [p for p in mine.rglob("*") if p.name != "todo.txt"]
    assert ours and all(stat.S_IMODE(p.stat().st_mode) & 0o077 == 0 for p in ours)
