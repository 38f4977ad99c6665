"""Exposure: admin token off loopback, Host check on loopback, no secrets in /healthz,
keyed full-length caller scopes in session ids."""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys

import httpx
import pytest

from context_engine.proxy.engine.session import caller_hash, session_id, session_key
from context_engine.proxy.settings import ConfigError, load_settings
from tests.conftest import REPO

MSGS = [{"role": "user", "content": "hi"}]
ADMIN = ("/stats", "/metrics", "/dashboard")


def test_non_loopback_bind_without_admin_token_refuses_to_start(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONTEXT_ENGINE_")}
    env["PYTHONPATH"] = str(REPO)
    run = subprocess.run(
        [sys.executable, "-m", "context_engine.proxy.cli", "serve", "--config", os.devnull, "--host", "0.0.0.0",
         "--port", "1", "--store", "memory://", "--ledger", str(tmp_path / "l.db")],
        env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    assert "admin_token" in run.stderr and "0.0.0.0" in run.stderr


def test_non_loopback_bind_with_admin_token_guards_admin_endpoints(start_proxy, mock):
    proxy = start_proxy(host="0.0.0.0", admin_token="s3cret-token")
    for path in ADMIN:
        r = httpx.get(proxy.url + path)
        assert r.status_code == 401, path
        assert r.json()["error"]["code"] == "invalid_admin_token"
        assert httpx.get(proxy.url + path, headers={"authorization": "Bearer nope"}).status_code == 401
        ok = httpx.get(proxy.url + path, headers={"authorization": "Bearer s3cret-token"})
        assert ok.status_code == 200, path
    basic = base64.b64encode(b"admin:s3cret-token").decode()
    assert httpx.get(proxy.url + "/dashboard",
                     headers={"authorization": f"Basic {basic}"}).status_code == 200
    assert httpx.get(proxy.url + "/healthz").status_code == 200
    assert proxy.client().chat.completions.create(model="gpt-4o", messages=MSGS).choices
    # off loopback the Host check is off: clients name the server as they please
    assert httpx.get(proxy.url + "/healthz", headers={"host": "proxy.example:80"}).status_code == 200


def test_loopback_without_token_serves_admin_endpoints(start_proxy):
    proxy = start_proxy()
    assert all(httpx.get(proxy.url + p).status_code == 200 for p in ADMIN)


@pytest.mark.parametrize("host,ok", [
    ("127.0.0.1", True), ("127.0.0.1:8787", True), ("localhost:1234", True), ("LOCALHOST", True),
    ("[::1]:8787", True), ("[::1]", True), ("proxy.internal:9000", True),
    ("evil.example", False), ("evil.example:8787", False), ("127.0.0.1.evil.example", False),
    ("localhost.evil.example:80", False), ("[::2]:80", False),
])
def test_loopback_checks_the_host_header(start_proxy, mock, host, ok):
    proxy = start_proxy(allowed_hosts="proxy.internal")
    before = len(mock.received)
    for method, path in (("GET", "/stats"), ("POST", "/v1/chat/completions"), ("GET", "/v1/models")):
        r = httpx.request(method, proxy.url + path, headers={"host": host},
                          json={"model": "gpt-4o", "messages": MSGS})
        if ok:
            assert r.status_code == 200, (host, path, r.text)
        else:
            assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_host"
    if not ok:
        assert len(mock.received) == before


def test_healthz_never_shows_upstream_credentials(start_proxy, mock):
    upstream = mock.url.replace("http://", "http://user:hunter2@") + "/v1"
    r = httpx.get(start_proxy(upstream=upstream).url + "/healthz")
    assert r.status_code == 200 and "hunter2" not in r.text and "user" not in r.json()["upstream"]
    assert r.json()["upstream"] == mock.url + "/v1"


def test_caller_scope_is_a_full_length_keyed_hash():
    headers = {"authorization": "Bearer sk-a", "x-session-id": "task-1"}
    key = session_key("k1", "memory://")
    sid = session_id(headers, MSGS, key)
    assert re.fullmatch(r"task-1~[0-9a-f]{64}", sid)
    assert sid != session_id(headers, MSGS, session_key("k2", "memory://"))
    assert sid != session_id({**headers, "authorization": "Bearer sk-b"}, MSGS, key)
    assert caller_hash(headers, key) != caller_hash(headers, session_key("", "memory://"))
    derived = session_id({"authorization": "Bearer sk-a"}, MSGS, key)
    assert derived.startswith("s-") and derived != session_id({"authorization": "Bearer sk-b"}, MSGS, key)


def test_replicas_sharing_a_store_compute_the_same_session_ids():
    a = load_settings(flags={"store": "redis://10.0.0.5:6379/0"}, env={}, config_path=os.devnull)
    b = load_settings(flags={"store": "redis://10.0.0.5:6379/0", "port": 9999}, env={},
                      config_path=os.devnull)
    c = load_settings(flags={"store": "redis://10.0.0.6:6379/0"}, env={}, config_path=os.devnull)
    keys = [session_key(s.session_key, s.store) for s in (a, b, c)]
    assert keys[0] == keys[1] != keys[2]
    set_key = load_settings(env={"CONTEXT_ENGINE_SESSION_KEY": "shared"}, config_path=os.devnull)
    assert session_key(set_key.session_key, set_key.store) == b"shared"


def test_ledger_rows_carry_the_keyed_scope(start_proxy):
    proxy = start_proxy(session_key="team-secret")
    proxy.client(default_headers={"x-session-id": "t1"}).chat.completions.create(
        model="gpt-4o", messages=MSGS)
    expected = session_id({"authorization": "Bearer sk-test-key", "x-session-id": "t1"}, MSGS,
                          b"team-secret")
    assert proxy.rows()[-1]["session"] == expected


def test_admin_token_setting_is_validated_at_start_up():
    with pytest.raises(ConfigError, match="admin_token"):
        from context_engine.proxy.edge.exposure import check_exposure

        check_exposure(load_settings(flags={"host": "10.1.2.3"}, env={}, config_path=os.devnull))
