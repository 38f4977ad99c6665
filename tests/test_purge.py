"""``context-engine purge`` deletes one session's, or one caller's, data from the store and
the ledger (and a project's ledger rows), and leaves every other session's alone. The
data is written by a real proxy; purge runs as the real command, in its own process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from context_engine.proxy.demo.mock_upstream import ServerThread
from context_engine.proxy.edge.app import create_app
from context_engine.proxy.engine.engine import Engine
from context_engine.proxy.engine.session import caller_hash, session_key
from context_engine.proxy.recording.ledger import read_rows
from context_engine.proxy.settings import load_settings
from context_engine.proxy.store.stores import open_store
from tests.conftest import REPO
from tests.test_store_quota import Keeps


class World:
    """A disk store and a ledger written by a proxy for alice and bob."""

    def __init__(self, tmp_path: Path, mock: Any, store_url: str) -> None:
        self.store_url, self.ledger = store_url, str(tmp_path / "ledger.db")
        settings = load_settings(flags={"rules": "", "store": self.store_url, "ledger": self.ledger,
                                        "upstream": mock.url + "/v1", "rules_deadline_ms": 0},
                                 env={}, config_path=os.devnull)
        rule = Keeps()
        engine = Engine(settings, rules=[rule])
        rule.store = engine.deps.store
        key = session_key(settings.session_key, settings.store)
        self.alice = caller_hash({}, key, "Bearer sk-alice")
        self.bob = caller_hash({}, key, "Bearer sk-bob")
        with ServerThread(create_app(settings, engine=engine)) as server:
            self.url = server.url
            for who, sid, text in [("alice", "one", "a1"), ("alice", "two", "a2"), ("alice", "", "a3"),
                                   ("bob", "one", "b1"), ("bob", "", "b2")]:
                self.ask(who, sid, text)
        engine.store.close()  # type: ignore[attr-defined]
        store = open_store(self.store_url)  # what an older version left, not in the index:
        store.set(f"orig:0123456789ab@{self.alice[:32]}", b"alice's tool result")
        store.set(f"orig:0123456789ab@{self.bob[:32]}", b"bob's tool result")
        store.set(f"compact:one~{self.alice}", b"alice's epochs")
        store.close()  # type: ignore[attr-defined]

    def ask(self, who: str, sid: str, text: str) -> None:
        headers = {"authorization": f"Bearer sk-{who}", "x-context-engine-project": f"/work/{who}"}
        if sid:
            headers["x-session-id"] = sid
        r = httpx.post(self.url + "/v1/chat/completions", headers=headers, timeout=30,
                       json={"model": "gpt-4o", "messages": [{"role": "user", "content": text}]})
        assert r.status_code == 200

    def purge(self, *args: str, env: dict[str, str] | None = None, stdin: str = "") -> str:
        done = subprocess.run(
            [sys.executable, "-m", "context_engine.proxy.cli", "purge", "--config", os.devnull,
             "--store", self.store_url, "--ledger", self.ledger, *args],
            capture_output=True, text=True, input=stdin, cwd=REPO, timeout=60,
            env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})
        assert done.returncode == 0, done.stderr
        return done.stdout

    def keys(self) -> set[str]:
        """Every key in the store (and, on Redis, the scope index's own keys)."""
        store = open_store(self.store_url)
        try:
            return set(store.keys_matching("*"))  # type: ignore[attr-defined]
        finally:
            store.close()  # type: ignore[attr-defined]

    def texts(self) -> set[str]:
        """What the rule stored, by request text, still in the store."""
        return {k.rsplit(":", 1)[1] for k in self.keys() if k.startswith("keeps:")}

    def sessions(self) -> list[str]:
        return sorted(r["session"] for r in read_rows(self.ledger))


@pytest.fixture(params=["disk", "redis"])
def world(request, tmp_path, mock) -> Iterator[World]:
    if request.param == "disk":
        yield World(tmp_path, mock, str(tmp_path / "store"))
        return
    if shutil.which("redis-server") is None:
        pytest.skip("needs redis-server")
    from tests.test_store_outage import ThrowawayRedis

    server = ThrowawayRedis(tmp_path)
    server.start()
    yield World(tmp_path, mock, server.url)
    server.stop()


def test_purging_a_session_removes_its_store_keys_and_ledger_rows_only(world):
    assert world.texts() == {"a1", "a2", "a3", "b1", "b2"} and len(world.sessions()) == 5
    out = world.purge("--session", f"one~{world.alice}")
    assert world.texts() == {"a2", "a3", "b1", "b2"}
    assert f"compact:one~{world.alice}" not in world.keys()
    assert f"one~{world.alice}" not in world.sessions() and f"one~{world.bob}" in world.sessions()
    assert len(world.sessions()) == 4 and "purged 2 store keys and 1 ledger rows" in out


def test_purging_a_caller_by_its_key_from_the_environment_removes_all_its_data(world):
    out = world.purge("--key", env={"CONTEXT_ENGINE_PURGE_KEY": "sk-alice"})
    assert world.texts() == {"b1", "b2"}  # the derived session's keys too
    assert not [k for k in world.keys() if world.alice[:32] in k]  # orig:…@alice, compact:…~alice
    assert f"orig:0123456789ab@{world.bob[:32]}" in world.keys()
    sessions = world.sessions()
    assert len(sessions) == 2 and f"one~{world.bob}" in sessions  # alice's derived session went too
    assert "ledger rows" in out and "sk-alice" not in out


def test_purging_a_caller_by_key_on_stdin_or_by_scope_digits_is_the_same(world):
    world.purge("--key", stdin="Bearer sk-bob\n")
    assert world.texts() == {"a1", "a2", "a3"} and len(world.sessions()) == 3
    world.purge("--scope", world.alice)
    assert world.texts() == set() and world.sessions() == []


def test_purging_a_project_removes_its_ledger_rows(world):
    world.purge("--project", "/work/bob")
    assert len(world.sessions()) == 3 and world.texts() == {"a1", "a2", "a3", "b1", "b2"}


def test_purge_refuses_a_key_on_the_command_line_and_an_empty_request(world, tmp_path):
    for args in (["--key", "sk-alice"], []):
        done = subprocess.run(
            [sys.executable, "-m", "context_engine.proxy.cli", "purge", "--config", os.devnull,
             "--store", world.store_url, "--ledger", world.ledger, *args],
            capture_output=True, text=True, input="", cwd=REPO, timeout=60,
            env={**os.environ, "PYTHONPATH": str(REPO)})
        assert done.returncode == 2, done
    assert world.texts() == {"a1", "a2", "a3", "b1", "b2"}


def test_a_callers_ledger_rows_go_by_key_even_when_the_store_forgot_them(world):
    """Each row records its caller scope (an HMAC, never the key): a derived session whose
    store keys all expired is still found in the ledger."""
    rows = read_rows(world.ledger)
    assert {r["scope"] for r in rows} == {world.alice, world.bob}
    assert not any("sk-alice" in str(v) or "sk-bob" in str(v) for r in rows for v in r.values())
    if world.store_url.startswith("redis://"):  # every store key expired, the index's too
        import redis

        redis.Redis.from_url(world.store_url).flushdb()
    else:
        shutil.rmtree(world.store_url)
    world.purge("--key", env={"CONTEXT_ENGINE_PURGE_KEY": "sk-alice"})
    assert {r["scope"] for r in read_rows(world.ledger)} == {world.bob}
