"""Two proxy replicas share one Redis store: an original one replica stored, the other reads."""

from __future__ import annotations

import json
import os
import uuid

import httpx
import pytest

from context_engine.proxy.engine.originals import original_id, stored_original
from context_engine.proxy.engine.session import caller_hash, session_key
from context_engine.proxy.store.breaker import GuardedStore
from context_engine.proxy.store.redis_store import RedisStore
from context_engine.proxy.store.stores import open_store
from context_engine.rules.tool_json.rule import ToolJson
from tests.harness import make_deps

REDIS = os.environ.get("CONTEXT_ENGINE_TEST_REDIS", "")
needs_redis = pytest.mark.skipif(not REDIS, reason="set CONTEXT_ENGINE_TEST_REDIS (CI starts redis-server)")


@needs_redis
def test_redis_store_round_trip():
    store = open_store(REDIS)
    assert isinstance(store, GuardedStore) and isinstance(store.inner, RedisStore)
    key = f"test:{uuid.uuid4()}"
    assert store.get(key) is None
    store.set(key, b"\x00bytes\xff")
    assert open_store(REDIS).get(key) == b"\x00bytes\xff"


@needs_redis
def test_replicas_share_tool_originals(start_proxy, mock):
    rule_a = ToolJson(ToolJson.Config(), make_deps(store=RedisStore(REDIS)))
    replica_a = start_proxy(rules=[rule_a])
    payload = json.dumps({"rows": [{"id": f"R{i}-{uuid.uuid4().hex[:6]}", "seat": None, "ok": True}
                                   for i in range(5)]}, indent=2)
    messages = [
        {"role": "user", "content": "list rows"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "rows", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": payload},
        {"role": "user", "content": "thanks, which is first?"},
    ]
    r = httpx.post(replica_a.url + "/v1/chat/completions", json={"model": "gpt-4o", "messages": messages})
    assert r.status_code == 200
    sent = mock.received[-1].json()["messages"][2]["content"]
    assert len(sent) < len(payload)
    # a second replica (its own process state, same Redis) finds the original by its id
    other = RedisStore(REDIS)
    scope = caller_hash({}, session_key("", "memory://"))  # the keyless caller of replica A
    assert stored_original(other, original_id(payload), scope=scope) == payload
