"""A pooled keep-alive connection the upstream closed: when the proxy sends again.

The upstream is a raw socket server on loopback: after answering, it closes the kept-alive
connection on the next request, either unread (a reset, as an idle timeout firing just as
the request arrives does) or after reading it (a clean close, no answer). The client is
the real openai SDK, through the real proxy.
"""

from __future__ import annotations

import httpx
import openai
import pytest

MSGS = [{"role": "user", "content": "hi"}]


def _bodies(raw, model: str) -> int:
    return sum(1 for r in raw.received if f'"model":"{model}"'.encode() in r.body.replace(b" ", b""))


def test_a_post_the_upstream_reset_unread_on_a_reused_connection_is_sent_once_more(start_proxy, raw):
    proxy = start_proxy(upstream=raw.url + "/v1")
    client = proxy.client()
    client.chat.completions.create(model="reset-next", messages=MSGS)
    reply = client.chat.completions.create(model="gpt-4o", messages=MSGS)
    assert reply.choices[0].message.content == "ok"
    assert _bodies(raw, "gpt-4o") == 1  # the reset copy was never read
    assert [r["error"] for r in proxy.rows()] == ["", ""]


def test_a_post_the_upstream_read_before_closing_is_not_sent_again(start_proxy, raw):
    proxy = start_proxy(upstream=raw.url + "/v1")
    client = proxy.client()
    client.chat.completions.create(model="drop-next", messages=MSGS)
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="gpt-4o", messages=MSGS)
    assert caught.value.status_code == 502
    assert _bodies(raw, "gpt-4o") == 1  # it may have been acted on: never a second copy


def test_an_idempotent_request_the_upstream_closed_unanswered_is_sent_once_more(start_proxy, raw):
    proxy = start_proxy(upstream=raw.url + "/v1")
    proxy.client().chat.completions.create(model="drop-next", messages=MSGS)
    r = httpx.get(proxy.url + "/v1/models", headers={"authorization": "Bearer sk-test"})
    assert r.status_code == 200
    assert [q.method for q in raw.received] == ["POST", "GET", "GET"]


def test_a_fresh_connection_the_upstream_resets_is_not_sent_again(start_proxy, raw):
    proxy = start_proxy(upstream=raw.url + "/v1")
    with pytest.raises(openai.APIError):
        proxy.client().chat.completions.create(model="cut-body", messages=MSGS)
    assert _bodies(raw, "cut-body") == 1
