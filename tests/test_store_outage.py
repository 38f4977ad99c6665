"""Store outages: bounded Redis calls, a circuit breaker, rules fail open, /healthz tells.

Each test runs its own throwaway redis-server (never the shared one) and stops it,
pauses it (SIGSTOP: connections hang, so only the timeouts end a call) or fills it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from typing import Any

import httpx
import numpy as np
import pytest
import redis

from context_engine.proxy.demo.mock_upstream import ServerThread
from context_engine.proxy.edge.app import create_app
from context_engine.proxy.engine.engine import Engine
from context_engine.proxy.settings import ConfigError, load_settings
from context_engine.proxy.store.breaker import GuardedStore
from context_engine.proxy.store.redis_store import RedisStore
from context_engine.proxy.store.stores import StoreUnavailable, open_store
from context_engine.rules.retrieve.embedders import HashingEmbedder
from context_engine.rules.retrieve.index import EmbeddingCache

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")


class ThrowawayRedis:
    def __init__(self, tmp_path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.dir = str(tmp_path)
        self.proc: subprocess.Popen | None = None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir], stdout=subprocess.DEVNULL)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                if redis.Redis(port=self.port, socket_timeout=0.5).ping():
                    return
            except redis.ConnectionError:
                time.sleep(0.02)
        raise AssertionError("throwaway redis did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)

    def pause(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=2)


@pytest.fixture
def throwaway(tmp_path):
    server = ThrowawayRedis(tmp_path)
    server.start()
    yield server
    server.stop()


def _timed(fn, *args):
    start = time.perf_counter()
    try:
        fn(*args)
    except StoreUnavailable:
        return time.perf_counter() - start
    raise AssertionError("the call did not fail")


def test_a_hung_redis_costs_one_timeout_then_the_circuit_opens(throwaway):
    store = open_store(throwaway.url)
    assert isinstance(store, GuardedStore) and isinstance(store.inner, RedisStore)
    store.set("k", b"v")
    assert store.get("k") == b"v"
    throwaway.pause()
    try:
        first = _timed(store.get, "k")
        second = _timed(store.get, "k")  # two failures in a row open the circuit
        assert store.health()["state"] == "down"
        rejected = [_timed(store.get, "k") for _ in range(20)]
    finally:
        throwaway.resume()
    assert 0.15 < first < 2.5 and 0.15 < second < 2.5  # the 200 ms read timeout, not redis-py's 5 s
    assert store.health()["rejected_calls"] == 20 and store.health()["failed_calls"] == 2
    assert sorted(rejected)[10] < 0.05  # rejected without a network call


def test_the_circuit_closes_when_the_store_answers_again(throwaway):
    store = GuardedStore(RedisStore(throwaway.url), failures=1, cooldown=0.2)
    throwaway.stop()
    with pytest.raises(StoreUnavailable):
        store.set("held", b"written later")
    assert store.health()["state"] == "down" and store.health()["held_writes"] == 1
    assert store.get("held") == b"written later"  # served from memory meanwhile
    throwaway.start()
    with pytest.raises(StoreUnavailable):
        store.get("other")  # still cooling down: no call is made
    time.sleep(0.25)
    assert store.get("other") is None  # the trial call succeeds and closes the circuit
    assert store.health()["state"] == "ok" and store.health()["held_writes"] == 0
    assert throwaway.client().get("ce:held") == b"written later"


def test_a_failed_write_after_an_embedding_is_not_redone_on_later_requests(throwaway):
    store = GuardedStore(RedisStore(throwaway.url), failures=3, cooldown=60)
    cache = EmbeddingCache(HashingEmbedder(), store)
    admin = throwaway.client()
    admin.config_set("maxmemory", "1")  # reads work, every write is refused (OOM)
    text = f"an old turn {uuid.uuid4()}"
    with pytest.raises(StoreUnavailable):
        cache.get([text])
    assert cache.embedded == 1 and store.health()["failed_calls"] == 1
    for _ in range(5):  # later requests: the vector comes from memory, nothing is re-sent
        vec = cache.get([text])
        assert vec.shape == (1, cache.embedder.dim)
    assert cache.embedded == 1 and store.health()["failed_calls"] == 1
    admin.config_set("maxmemory", "0")
    cache.get(["another text"])  # a successful call writes the held vector out
    key = next(k for k in admin.keys("ce:emb:*") if admin.get(k) == vec.astype(np.float32).tobytes())
    assert key and store.health()["held_writes"] == 0


def test_during_an_outage_requests_go_out_promptly_and_healthz_shows_the_store(throwaway, mock, tmp_path):
    settings = load_settings(flags={"rules": "tool_json", "store": throwaway.url,
                                    "ledger": str(tmp_path / "l.db"), "upstream": mock.url + "/v1"},
                             env={}, config_path=os.devnull)
    engine = Engine(settings)
    assert isinstance(engine.store, GuardedStore)
    payload = '{"rows": [' + ", ".join(f'{{"id": "R{i}", "seat": null, "note": ""}}' for i in range(20)) + "]}"
    body: dict[str, Any] = {"model": "gpt-4o", "messages": [
        {"role": "user", "content": "list rows"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "rows", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": payload},
        {"role": "user", "content": "which is first?"}]}
    with ServerThread(create_app(settings, engine=engine)) as server:
        r = httpx.post(server.url + "/v1/chat/completions", json=body)
        assert r.status_code == 200 and len(mock.received[-1].json()["messages"][2]["content"]) < len(payload)
        throwaway.pause()
        try:
            times = []
            for i in range(4):
                body["messages"][-1]["content"] = f"which is first? ({i})"
                start = time.perf_counter()
                r = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=30)
                times.append(time.perf_counter() - start)
                assert r.status_code == 200
                assert mock.received[-1].json()["messages"][2]["content"] == payload  # failed open
            health = httpx.get(server.url + "/healthz").json()
        finally:
            throwaway.resume()
    assert max(times) < 4.0  # a 5 s default timeout per store call would exceed it on each request
    assert health["status"] == "degraded" and health["store"]["state"] == "down"
    assert health["store"]["failed_calls"] == 2 and health["store"]["rejected_calls"] == 2  # two timeouts, then none
    assert any(reason.startswith("store is down") for reason in health["reasons"])
    assert health["rule_failures"]["tool_json"] == 4


def test_redis_keys_expire_after_store_ttl_days_of_no_use(throwaway, tmp_path):
    settings = load_settings(flags={"store": throwaway.url, "store_ttl_days": 2, "rules": "",
                                    "ledger": str(tmp_path / "l.db")}, env={}, config_path=os.devnull)
    engine = Engine(settings)
    try:
        engine.store.set("orig:k", b"v")
        ttl = throwaway.client().ttl("ce:orig:k")
        assert 2 * 86400 - 5 <= ttl <= 2 * 86400
        throwaway.client().expire("ce:orig:k", 100)
        assert engine.store.get("orig:k") == b"v"  # a read renews it
        assert throwaway.client().ttl("ce:orig:k") > 100
    finally:
        engine.close()
    forever = open_store(throwaway.url, ttl_s=0)
    forever.set("kept", b"v")
    assert throwaway.client().ttl("ce:kept") == -1
    with pytest.raises(ConfigError, match="store_ttl_days"):
        load_settings(flags={"store_ttl_days": -1}, env={}, config_path=os.devnull)
