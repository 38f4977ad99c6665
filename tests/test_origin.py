"""Web pages cannot use the proxy: a request a browser makes for another site's page
(``Origin``, ``Sec-Fetch-Site``) is refused before it is read, parsed, sent or recorded;
agents and SDKs (which send neither) and the dashboard's own calls are not affected."""

from __future__ import annotations

import httpx
import pytest

from context_engine.proxy.edge.origin import allowed_origins
from context_engine.proxy.settings import ConfigError

CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Hello there."}]}
KEY = {"authorization": "Bearer sk-test-key"}


@pytest.mark.parametrize("browser", [
    {"origin": "https://evil.example"},
    {"origin": "null"},
    {"origin": "http://localhost:1"},
    {"sec-fetch-site": "cross-site"},
    {"sec-fetch-site": "same-site"},
])
def test_a_web_page_request_is_refused_before_anything_runs(start_proxy, mock, browser):
    proxy = start_proxy(enabled="fold_duplicates")
    before, rows = len(mock.received), len(proxy.rows())
    r = httpx.post(proxy.url + "/v1/chat/completions", json=CHAT, headers={**KEY, **browser})
    assert r.status_code == 403
    assert r.json()["error"]["code"] == "invalid_origin"
    assert len(mock.received) == before and len(proxy.rows()) == rows
    # every route, every API: the Anthropic shape on /v1/messages, passthrough, admin
    r = httpx.post(proxy.url + "/v1/messages", json=CHAT, headers={"x-api-key": "k", **browser})
    assert r.status_code == 403 and r.json()["type"] == "error"
    for path in ("/v1/models", "/stats", "/_tag/codex/eA/v1/chat/completions"):
        assert httpx.get(proxy.url + path, headers=browser).status_code == 403, path
    assert len(mock.received) == before


def test_agents_the_dashboard_and_allowed_origins_pass(start_proxy, mock):
    proxy = start_proxy(allowed_origins="https://ide.example.com, http://127.0.0.1:3000/")
    ok = [{}, {"origin": "https://ide.example.com"}, {"origin": "HTTP://127.0.0.1:3000"},
          {"origin": proxy.url}, {"sec-fetch-site": "same-origin"}, {"sec-fetch-site": "none"}]
    for extra in ok:
        r = httpx.post(proxy.url + "/v1/chat/completions", json=CHAT, headers={**KEY, **extra})
        assert r.status_code == 200, extra
    assert httpx.get(proxy.url + "/stats", headers={"origin": proxy.url,
                                                    "sec-fetch-site": "same-origin"}).status_code == 200


@pytest.mark.parametrize("bad", ["evil.example", "ftp://x", "https://", "https://a/b", "*"])
def test_a_bad_allowed_origin_stops_start_up_naming_the_key(bad):
    with pytest.raises(ConfigError, match="allowed_origins"):
        allowed_origins(f"https://ok.example, {bad}")
