"""Requests the upstream refuses leave nothing behind: the rules' store writes (stored
originals, compaction lines, retrieve's zones and embeddings, the recall state) are held
until the upstream answers, committed when it accepts and dropped when it refuses (any
4xx), so a flood of made-up keys cannot fill the store and evict real tenants. The
refused request still has its ledger row, and its client gets the upstream's answer as
it came. Nor can refused requests take the ``/metrics`` model-label slots."""

from __future__ import annotations

import contextlib
import json
import os
import random
import string

import diskcache
import httpx
import pytest

from context_engine.proxy.demo.server_thread import ServerThread
from context_engine.proxy.edge.app import create_app
from context_engine.proxy.engine.engine import Engine
from context_engine.proxy.engine.originals import stored_original
from context_engine.proxy.engine.session import caller_hash, session_key
from context_engine.proxy.settings import load_settings
from context_engine.proxy.store.stores import DiskStore, MemoryStore
from tests.conftest import RunningProxy
from tests.fakes.refusing_upstream import GOOD_KEY, RefusingUpstream

RULES = "compact,tool_json,retrieve"
OPTIONS = {"tool_json": {"max_chars": 600}, "retrieve": {"embedder": "hashing", "window": 4},
           "compact": {"trigger_tokens": 1000, "clear_at_least": 200}}


def conversation(turns: int = 8, salt: str = "") -> list[dict]:
    """An agent session with big tool results (every rule has something to store)."""
    messages: list[dict] = [{"role": "system", "content": "You are an agent."},
                            {"role": "user", "content": f"Check the sensors {salt}."}]
    for t in range(turns):
        rows = "\n".join(f"row {i}: sensor-{t}-{i} read {(i * 7 + t) % 101} units {salt}"
                         for i in range(120))
        messages += [{"role": "assistant", "content": f"Looking at batch {t}.", "tool_calls": [
            {"id": f"call_{t}", "type": "function",
             "function": {"name": "lookup", "arguments": json.dumps({"batch": t})}}]},
            {"role": "tool", "tool_call_id": f"call_{t}", "content": rows}]
    messages.append({"role": "user", "content": "What did sensor-3-100 read?"})
    return messages


@pytest.fixture(scope="module")
def upstream():
    with RefusingUpstream() as server:
        yield server


@contextlib.contextmanager
def proxy_with(store, upstream_url, tmp_path):
    flags = {"rules": RULES, "rule_options": OPTIONS, "store": "memory://", "rules_deadline_ms": 0,
             "upstream": upstream_url + "/v1", "ledger": str(tmp_path / "ledger.db"),
             "session_key": "team-secret"}
    settings = load_settings(flags=flags, env={}, config_path=os.devnull)
    engine = Engine(settings, store=store)
    app = create_app(settings, engine=engine)
    with ServerThread(app) as server:
        yield RunningProxy(server, app, settings.ledger)


def _post(proxy, key: str, messages: list[dict]) -> httpx.Response:
    return httpx.post(proxy.url + "/v1/chat/completions", json={"model": "gpt-4o", "messages": messages},
                      headers={"authorization": f"Bearer {key}"}, timeout=60)


def _settled(proxy) -> None:
    proxy.rows()  # every row finished
    commits = getattr(proxy.app.state.engine, "commits", None)  # (run on older code too)
    if commits is not None:
        commits.drain()


def _disk_keys(path) -> set:
    with diskcache.Cache(str(path)) as cache:
        return set(cache.iterkeys())


@pytest.mark.parametrize("kind", ["disk", "memory"])
def test_refused_requests_commit_nothing_and_accepted_ones_do(upstream, tmp_path, kind):
    memory = MemoryStore()
    store = DiskStore(str(tmp_path / "store")) if kind == "disk" else memory

    def keys() -> set:
        return _disk_keys(tmp_path / "store") if kind == "disk" else set(memory._data)

    with proxy_with(store, upstream.url, tmp_path) as proxy:
        before, refused_rows = keys(), 0
        for n in range(6):  # made-up keys, each its own caller scope and session
            r = _post(proxy, f"sk-made-up-{n}", conversation(salt=str(n)))
            assert r.status_code == 401 and r.json()["error"]["message"] == "refused"
            refused_rows += 1
        _settled(proxy)
        assert keys() == before
        assert proxy.app.state.engine.prefetch() == 0  # their background work was dropped
        assert keys() == before
        rows = proxy.rows()
        assert len(rows) == refused_rows and all(row["status"] == 401 for row in rows)
        assert any(row["tokens_sent"] < row["tokens_original"] for row in rows)  # the rules ran

        messages = conversation(salt="good")
        r = _post(proxy, GOOD_KEY, messages)
        assert r.status_code == 200
        _settled(proxy)
        written = keys() - before
        assert written, "an accepted request's writes are committed"
        scope = caller_hash({"authorization": f"Bearer {GOOD_KEY}"}, session_key("team-secret", ""))
        refs = [k.split("@")[0] for k in written if k.startswith("orig:") and k.endswith(scope[:32])]
        assert refs and all(stored_original(store, ref, scope=scope) for ref in refs)


def test_every_refusal_status_drops_the_writes(upstream, tmp_path):
    store = MemoryStore()
    with proxy_with(store, upstream.url, tmp_path) as proxy:
        try:
            for status in (400, 403, 404, 413, 422, 429):
                upstream.status = status
                assert _post(proxy, GOOD_KEY, conversation(salt=str(status))).status_code == status
            _settled(proxy)
            assert store.held_bytes == 0
        finally:
            upstream.status = 401


def test_refused_requests_cannot_take_the_model_label_slots(upstream, tmp_path):
    store = MemoryStore()
    rng = random.Random(7)
    with proxy_with(store, upstream.url, tmp_path) as proxy:
        url = proxy.url + "/v1/chat/completions"
        for _ in range(110):
            model = "".join(rng.choices(string.ascii_lowercase, k=12))
            r = httpx.post(url, json={"model": model, "messages": [{"role": "user", "content": "hi"}]},
                           headers={"authorization": "Bearer sk-made-up"})
            assert r.status_code == 401
        r = httpx.post(url, json={"model": "gpt-4o-real", "messages": [{"role": "user", "content": "hi"}]},
                       headers={"authorization": f"Bearer {GOOD_KEY}"})
        assert r.status_code == 200
        proxy.rows()
        text = httpx.get(proxy.url + "/metrics").text
    assert 'model="gpt-4o-real"' in text
    assert 'model="(not accepted)"' in text
    assert sum(1 for line in text.splitlines()
               if line.startswith("context_engine_requests_total{")) == 2


@pytest.mark.parametrize("status", [401, 429])
def test_a_refused_shadow_request_runs_no_background_rewrite(upstream, tmp_path, status):
    store = MemoryStore()
    with proxy_with(store, upstream.url, tmp_path) as proxy:
        upstream.status = status
        try:
            r = httpx.post(proxy.url + "/v1/chat/completions",
                           json={"model": "gpt-4o", "messages": conversation(salt="shadow")},
                           headers={"authorization": f"Bearer {GOOD_KEY if status != 401 else 'sk-x'}",
                                    "x-context-engine-mode": "shadow"}, timeout=60)
            assert r.status_code == status
            rows = proxy.rows()
        finally:
            upstream.status = 401
        _settled(proxy)
    assert rows[-1]["arm"] == "shadow" and store.held_bytes == 0
