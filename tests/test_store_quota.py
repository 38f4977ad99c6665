"""Each caller scope has a bound in the store: one caller writing far past its share evicts
only its own least recently used entries; every other caller's stay. Memory, diskcache
and Redis stores alike, and through a real proxy with two API keys."""

from __future__ import annotations

import os
import shutil
from typing import Any

import httpx
import pytest

from context_engine.proxy.demo.mock_upstream import ServerThread
from context_engine.proxy.edge.app import create_app
from context_engine.proxy.engine.context import RequestContext
from context_engine.proxy.engine.engine import Engine
from context_engine.proxy.engine.session import caller_hash, session_key
from context_engine.proxy.settings import ConfigError, load_settings
from context_engine.proxy.store.scopes import writing_as
from context_engine.proxy.store.stores import open_store
from tests.fakes.rules import NoConfig

A, B = "a" * 64, "b" * 64
SHARE = 20_000


@pytest.fixture(params=["memory", "disk", "redis"])
def store_url(request, tmp_path):
    if request.param == "memory":
        yield "memory://"
    elif request.param == "disk":
        yield str(tmp_path / "store")
    else:
        if shutil.which("redis-server") is None:
            pytest.skip("needs redis-server")
        from tests.test_store_outage import ThrowawayRedis

        server = ThrowawayRedis(tmp_path)
        server.start()
        yield server.url
        server.stop()


def _fill(store: Any, scope: str, n: int, prefix: str, size: int = 1000) -> list[str]:
    keys = []
    with writing_as(scope, f"{prefix}-session"):
        for i in range(n):
            key = f"{prefix}:{i}"
            store.set(key, bytes([i % 256]) * size)
            keys.append(key)
    return keys


def test_a_scope_filling_its_share_evicts_only_its_own_entries(store_url):
    store = open_store(store_url, scope_bytes=SHARE)
    b_keys = _fill(store, B, 10, "b")  # 10 kB: half of B's share
    a_keys = _fill(store, A, 500, "a")  # 500 kB: 25 times A's share
    assert all(store.get(k) is not None for k in b_keys), "another scope's entries were evicted"
    kept = [k for k in a_keys if store.get(k) is not None]
    assert 10 <= len(kept) <= SHARE // 1000
    assert kept == a_keys[-len(kept):]  # the most recent stay, the oldest left first
    assert store.quota.index.scope_bytes(A, 0) <= SHARE  # type: ignore[attr-defined]


def test_a_read_keeps_an_entry_among_the_scopes_recent_ones(store_url):
    store = open_store(store_url, scope_bytes=SHARE)
    first = _fill(store, A, 10, "early")[0]
    for i in range(30):
        assert store.get(first) is not None, f"evicted after {i} more writes though read each time"
        _fill(store, A, 1, f"late{i}")


def test_a_value_larger_than_the_share_is_not_kept(store_url):
    store = open_store(store_url, scope_bytes=SHARE)
    b_keys = _fill(store, B, 5, "b")
    with writing_as(A, "s"):
        store.set("huge", b"x" * (SHARE + 1))
    assert store.get("huge") is None
    assert all(store.get(k) is not None for k in b_keys)


def test_the_share_is_a_setting_with_a_default_and_no_negatives():
    settings = load_settings(flags={}, env={}, config_path=os.devnull)
    assert settings.store_scope_bytes == 64 * 1024 * 1024
    with pytest.raises(ConfigError, match="store_scope_bytes"):
        load_settings(flags={"store_scope_bytes": -1}, env={}, config_path=os.devnull)


class Keeps:
    """A rule that stores 2 kB per request under a key of its session."""

    name = "keeps"
    Config = NoConfig

    def __init__(self) -> None:
        self.store: Any = None  # the engine's (it routes writes through the request's commit)

    async def apply(self, ctx: RequestContext) -> RequestContext:
        text = str(ctx.messages[-1]["content"])
        self.store.set(f"keeps:{ctx.session_id}:{text}", text.encode() * 2000)
        return ctx


def test_through_the_proxy_one_key_filling_its_share_leaves_the_other_keys_entries(mock, tmp_path):
    settings = load_settings(flags={"rules": "", "store": str(tmp_path / "store"), "store_scope_bytes": 30_000,
                                    "ledger": str(tmp_path / "l.db"), "upstream": mock.url + "/v1",
                                    "rules_deadline_ms": 0}, env={}, config_path=os.devnull)
    rule = Keeps()
    engine = Engine(settings, rules=[rule])  # its store: open_store with the settings' share
    rule.store = engine.deps.store

    def ask(key: str, text: str) -> None:
        r = httpx.post(server.url + "/v1/chat/completions", timeout=30,
                       headers={"authorization": f"Bearer {key}", "x-session-id": "work"},
                       json={"model": "gpt-4o", "messages": [{"role": "user", "content": text}]})
        assert r.status_code == 200

    with ServerThread(create_app(settings, engine=engine)) as server:
        ask("sk-bob", "b")
        for i in range(60):  # 60 × 2 kB: four times alice's share
            ask("sk-alice", f"{i:02d}")
    scope_key = session_key(settings.session_key, settings.store)
    bob = caller_hash({}, scope_key, "Bearer sk-bob")
    alice = caller_hash({}, scope_key, "Bearer sk-alice")
    assert engine.store.get(f"keeps:work~{bob}:b") is not None
    index = engine.store.quota.index  # type: ignore[attr-defined]
    assert index.keys_of(scope=bob) == [f"keeps:work~{bob}:b"]
    alice_keys = index.keys_of(scope=alice)
    assert 0 < len(alice_keys) <= 15 and f"keeps:work~{alice}:59" in alice_keys
    assert engine.store.get(f"keeps:work~{alice}:00") is None
