"""What an unauthenticated caller can reach: /healthz says only ok/degraded when an admin
token is set and not given; /v1/* needs a client token when ``client_tokens`` is set; the
proxy's own headers and Connection-nominated ones never reach the upstream; ``..;``
segments are refused; one function redacts URLs and DSNs."""

from __future__ import annotations

import os

import httpx
import pytest

from context_engine.proxy.edge.exposure import check_exposure
from context_engine.proxy.sanitize import redact_url
from context_engine.proxy.settings import ConfigError, load_settings

MSGS = [{"role": "user", "content": "hi"}]
TOKEN = "client-token-0123456789"


def test_healthz_answers_status_only_without_the_admin_token(start_proxy):
    proxy = start_proxy(admin_token="admin-secret-token")
    bare = httpx.get(proxy.url + "/healthz")
    assert bare.status_code == 200 and bare.json() == {"status": "ok"}
    full = httpx.get(proxy.url + "/healthz", headers={"authorization": "Bearer admin-secret-token"})
    assert {"replica", "texts_embedded", "ledger", "store", "upstream"} <= set(full.json())


def test_healthz_without_an_admin_token_configured_keeps_its_details(start_proxy):
    assert "ledger" in httpx.get(start_proxy().url + "/healthz").json()


def test_client_tokens_guard_the_api_and_never_reach_the_upstream(start_proxy, mock):
    proxy = start_proxy(client_tokens=f"{TOKEN},another-token-abcdefgh")
    before = len(mock.received)
    r = httpx.post(proxy.url + "/v1/chat/completions", json={"model": "gpt-4o", "messages": MSGS})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_client_token"
    r = httpx.get(proxy.url + "/v1/models", headers={"x-context-engine-token": "wrong"})
    assert r.status_code == 401
    r = httpx.post(proxy.url + "/v1/messages", json={"model": "claude", "messages": MSGS,
                                                     "max_tokens": 5})
    assert r.status_code == 401 and r.json()["type"] == "error"  # Anthropic's shape
    assert len(mock.received) == before
    ok = proxy.client(default_headers={"x-context-engine-token": TOKEN}).chat.completions.create(
        model="gpt-4o", messages=MSGS)
    assert ok.choices
    assert "x-context-engine-token" not in mock.received[-1].headers
    keyless = proxy.client(api_key=TOKEN).chat.completions.create(model="gpt-4o", messages=MSGS)
    assert keyless.choices
    assert TOKEN not in str(mock.received[-1].headers)  # a client token used as the key stays here
    other = proxy.client(api_key="another-token-abcdefgh").chat.completions.create(
        model="gpt-4o", messages=MSGS)
    assert other.choices and "another-token" not in str(mock.received[-1].headers)
    sessions = [row["session"] for row in proxy.rows()]
    assert sessions[-1] != sessions[-2]  # each token is its own caller scope
    assert httpx.get(proxy.url + "/healthz").status_code == 200


def test_client_tokens_are_validated_at_start_up():
    with pytest.raises(ConfigError, match="client_tokens"):
        check_exposure(load_settings(flags={"client_tokens": "short"}, env={},
                                     config_path=os.devnull))


def test_the_proxys_own_and_connection_nominated_headers_stay_here(start_proxy, mock):
    proxy = start_proxy()
    r = httpx.post(proxy.url + "/v1/chat/completions", json={"model": "gpt-4o", "messages": MSGS},
                   headers={"x-session-id": "s1", "x-context-engine-rules": "off",
                            "connection": "keep-alive, x-hop-secret", "x-hop-secret": "v",
                            "x-kept": "yes"})
    assert r.status_code == 200
    sent = mock.received[-1].headers
    assert "x-kept" in sent
    assert not {"x-session-id", "x-context-engine-rules", "x-hop-secret"} & set(sent)
    httpx.get(proxy.url + "/v1/models", headers={"x-session-id": "s1", "connection": "x-a",
                                                 "x-a": "1"})
    assert not {"x-session-id", "x-a"} & set(mock.received[-1].headers)


@pytest.mark.parametrize("path", ["/v1/..;/admin", "/v1/models/..;x/secret", "/v1/.;/models",
                                  "/v1/%2e%2e;/admin"])
def test_dot_segments_with_parameters_are_refused(start_proxy, mock, path):
    proxy = start_proxy()
    before = len(mock.received)
    r = httpx.get(proxy.url + path)
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_path"
    assert len(mock.received) == before


@pytest.mark.parametrize("url,shown", [
    ("postgresql://app:pw@db.internal:5432/ledger?sslpassword=x&sslmode=require",
     "postgresql://db.internal:5432/ledger"),
    ("redis://:pw@cache:6379/0?socket_timeout=0.5", "redis://cache:6379/0"),
    ("https://user:key@api.example/v1?key=sk", "https://api.example/v1"),
    ("rediss://u:pw@[::1]:6380/0#frag", "rediss://[::1]:6380/0"),
    ("host=db sslpassword=x password = 'a b' dbname=l", "host=db sslpassword=*** password = *** dbname=l"),
    ("host=db.internal user=app password=pw dbname=ledger", "host=db.internal user=app password=*** dbname=ledger"),
    (".context-engine/ledger.db", ".context-engine/ledger.db"),
])
def test_one_function_redacts_urls_and_dsns(url, shown):
    assert redact_url(url) == shown
