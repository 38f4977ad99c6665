"""Requests without a credential, before an upstream that refuses them: once the upstream
has answered one of them 401, the rules never start on the next ones (a keyless caller's
huge body costs the others nothing but its relay). A keyless upstream never refuses, so
there the rules keep running; a request with a key always gets them."""

from __future__ import annotations

from context_engine.bench.load_mock import Chooser, build_app
from context_engine.proxy.demo.server_thread import ServerThread
from tests.fakes.rules import Counting

BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}]}


def test_rules_skip_keyless_requests_once_the_upstream_refused_one(start_proxy):
    import httpx

    rule = Counting()
    with ServerThread(build_app(0.0, Chooser({}, 1))) as upstream:  # answers 401 without a key
        proxy = start_proxy(rules=[rule], upstream=upstream.url + "/v1")
        url = proxy.url + "/v1/chat/completions"
        assert httpx.post(url, json=BODY).status_code == 401
        assert rule.seen == 1  # nothing learned yet: the rules ran
        for _ in range(2):
            assert httpx.post(url, json=BODY).status_code == 401
        # not even parsed: a body the proxy would answer 400 gets the upstream's 401
        assert httpx.post(url, content=b"{not json", headers={"content-type": "application/json"}
                          ).status_code == 401
        assert rule.seen == 1
        assert httpx.post(url, json=BODY, headers={"authorization": "Bearer k"}).status_code == 200
        assert rule.seen == 2
        rows = proxy.rows()
    skipped = [r for r in rows if '"skipped": "no_credentials"' in r["context"]]
    assert len(rows) == 5 and len(skipped) == 3 and {r["arm"] for r in skipped} == {"bypass"}
    assert all(r["status"] == 401 for r in skipped)
    # a refused request is not measured either (no reply to measure; its body is let go at once)
    refused = [r for r in rows if r["status"] == 401]
    assert len(refused) == 4 and all('"unmeasured": "refused"' in r["context"] for r in refused)


def test_rules_run_on_keyless_requests_before_an_upstream_that_takes_them(start_proxy):
    import httpx

    rule = Counting()
    proxy = start_proxy(rules=[rule])  # the demo mock answers every request
    for _ in range(3):
        assert httpx.post(proxy.url + "/v1/chat/completions", json=BODY).status_code == 200
    assert rule.seen == 3
