"""The ledger never dies and never lies: bad values, failed writes, a dead writer."""

from __future__ import annotations

import time

import httpx

SURROGATE_MODEL = b'{"model": "\\ud800", "messages": [{"role": "user", "content": "hi"}]}'


def test_surrogate_in_model_leaves_the_ledger_writing(start_proxy):
    proxy = start_proxy()
    r = httpx.post(proxy.url + "/v1/chat/completions", content=SURROGATE_MODEL,
                   headers={"content-type": "application/json"})
    assert r.headers["x-context-engine-tokens-before"]  # relayed from the upstream, whatever it said
    reply = proxy.client().chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "after the bad one"}])
    assert reply.choices[0].message.content
    rows = proxy.rows()
    assert [row["model"] for row in rows] == ["\\ud800", "gpt-4o"]
    metrics = httpx.get(proxy.url + "/metrics")
    assert metrics.status_code == 200
    assert 'model="gpt-4o"' in metrics.text
    assert httpx.get(proxy.url + "/healthz").json()["status"] == "ok"
    start = time.perf_counter()
    stats = httpx.get(proxy.url + "/stats", timeout=30)
    assert stats.status_code == 200 and stats.json()["overall"]["requests"] == 2
    assert time.perf_counter() - start < 2.0
