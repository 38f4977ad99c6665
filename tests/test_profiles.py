"""Profiles per model, the X-Context-Engine-Rules header, cache options and
prompt_cache_key, through the real server and the mock upstream."""

from __future__ import annotations

import json
import os
from typing import Any

import httpx
import pytest

from context_engine.proxy.demo.mock_upstream import ServerThread
from context_engine.proxy.edge.app import create_app
from context_engine.proxy.engine.engine import Engine
from context_engine.proxy.engine.profiles import prompt_cache_key
from context_engine.proxy.settings import ConfigError, load_settings
from context_engine.proxy.store.stores import MemoryStore
from tests.conftest import RunningProxy

LONG = "The deployment log shows " + " ".join(f"step{i} ok" for i in range(120))
MSGS = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What did the log say?"},
    {"role": "assistant", "content": LONG},
    {"role": "user", "content": "Say it again."},
    {"role": "assistant", "content": LONG},
    {"role": "user", "content": "Thanks. And now?"},
]


@pytest.fixture
def named_proxy(mock, tmp_path):
    """A proxy whose rules are named in its settings (so profiles can build theirs)."""
    servers: list[Any] = []

    def start(rules: str, **flags):
        flags.update(rules=rules, store="memory://", upstream=mock.url + "/v1",
                     ledger=str(tmp_path / f"l{len(servers)}.db"))
        settings = load_settings(flags=flags, env={}, config_path=os.devnull)
        app = create_app(settings, engine=Engine(settings, store=MemoryStore()))
        servers.append(ServerThread(app).__enter__())
        return RunningProxy(servers[-1], app, settings.ledger)

    yield start
    for s in servers:
        s.__exit__(None, None, None)


def _post(proxy, body, **headers):
    raw = json.dumps(body).encode()
    return raw, httpx.post(proxy.url + "/v1/chat/completions", content=raw,
                           headers={"content-type": "application/json", **headers})


def test_rules_header_off_sends_the_client_bytes(named_proxy, mock):
    proxy = named_proxy("fold_duplicates")
    _, r = _post(proxy, {"model": "gpt-4o", "messages": MSGS})
    assert int(r.headers["x-context-engine-tokens-after"]) < int(r.headers["x-context-engine-tokens-before"])
    raw, r = _post(proxy, {"model": "gpt-4o", "messages": MSGS}, **{"X-Context-Engine-Rules": "off"})
    assert r.status_code == 200 and mock.received[-1].body == raw
    row = proxy.rows()[-1]
    assert row["arm"] == "bypass" and row["tokens_original"] == row["tokens_sent"]


def test_rules_header_rejects_unknown_values(start_proxy):
    proxy = start_proxy()
    _, r = _post(proxy, {"model": "gpt-4o", "messages": MSGS}, **{"X-Context-Engine-Rules": "most"})
    assert r.status_code == 400
    err = r.json()["error"]
    assert "off, lossless, default" in err["message"] and err["param"] == "x-context-engine-rules"


def test_lossless_and_profiles_build_their_own_pipelines(named_proxy, mock):
    profiles = [{"match": "mock-lossless-*", "rules": {"fold_duplicates": False, "tool_json": True}},
                {"match": ["gpt-4o*"], "rule_options": {"fold_duplicates": {"min_saving": 1000000}}}]
    proxy = named_proxy("fold_duplicates,tool_json,budget", profiles=profiles)
    engine = proxy.app.state.engine
    assert engine.pipelines["lossless"].names == ["fold_duplicates", "tool_json"]
    lossless_tool = engine.pipelines["lossless"].rules[1].config
    assert not lossless_tool.templates and not lossless_tool.stub_unused and lossless_tool.max_chars == 0
    assert engine.pipelines["profile:0"].names == ["tool_json"]
    # gpt-4o's profile sets a min_saving no fold reaches: the request goes out unchanged
    raw, r = _post(proxy, {"model": "gpt-4o", "messages": MSGS})
    assert mock.received[-1].body == raw
    _, r = _post(proxy, {"model": "gpt-5", "messages": MSGS})
    assert int(r.headers["x-context-engine-tokens-after"]) < int(r.headers["x-context-engine-tokens-before"])


def test_prompt_cache_key_is_the_one_field_added(start_proxy, mock):
    proxy = start_proxy(cache={"prompt_cache_key": "session"})
    raw, r = _post(proxy, {"model": "gpt-4o", "messages": MSGS}, **{"X-Session-Id": "k1"})
    assert r.status_code == 200
    sent = mock.received[-1].body
    body = json.loads(sent)
    session = proxy.rows()[-1]["session"]
    assert body.pop("prompt_cache_key") == prompt_cache_key(session)
    assert sent.startswith(raw[:-1]) and body == json.loads(raw)
    raw, _ = _post(proxy, {"model": "gpt-4o", "messages": MSGS, "prompt_cache_key": "mine"})
    assert mock.received[-1].body == raw  # the client's own key is never replaced
    off = start_proxy()
    raw, _ = _post(off, {"model": "gpt-4o", "messages": MSGS})
    assert mock.received[-1].body == raw


@pytest.mark.parametrize("config, key", [
    ({"cache": {"prompt_cache_key": "always"}}, "cache.prompt_cache_key"),
    ({"cache": {"breakpoints": True}}, "cache.breakpoints"),
    ({"cache": {"auto_breakpoints": "yes"}}, "cache.auto_breakpoints"),
    ({"profiles": {"match": "x"}}, "profiles"),
    ({"profiles": [{"match": "x", "rulez": {}}]}, "profiles[0].rulez"),
    ({"profiles": [{"rules": {}}]}, "profiles[0].match"),
    ({"profiles": [{"match": "x", "rules": {"nope": True}}]}, "nope"),
    ({"profiles": [{"match": "x", "rule_options": {"retrieve": {"top_q": 3}}}]},
     "profiles[0].rule_options.retrieve.top_q"),
])
def test_bad_cache_and_profile_settings_stop_start_up(tmp_path, config, key):
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(config))
    with pytest.raises(ConfigError) as exc:
        load_settings(env={}, config_path=str(path))
    assert key in str(exc.value)


def test_good_profiles_load():
    s = load_settings(flags={"profiles": [{"match": ["claude-*"], "rules": ["fold_duplicates"]}],
                             "cache": {"auto_breakpoints": True}}, env={}, config_path=os.devnull)
    assert s.profiles[0].matches("claude-sonnet-4-5") and s.profiles[0].rules == ("fold_duplicates",)
    assert s.cache.auto_breakpoints and s.cache.prompt_cache_key == "off"
