"""Reading request bodies under limits, through a real server: a deadline to read one,
a budget of body bytes in flight across requests, and uvicorn's limit_concurrency."""

from __future__ import annotations

import json
import os
import socket
import time

import httpx
import pytest

from context_engine.proxy.cli import server_options
from context_engine.proxy.settings import ConfigError, load_settings

BODY = json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}).encode()


def _partial(url: str, declared: int, sent: bytes) -> socket.socket:
    """A client that declares ``declared`` body bytes, sends ``sent`` and then stalls."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                 + f"content-length: {declared}\r\n\r\n".encode() + sent)
    return sock


def _status(sock: socket.socket) -> int:
    sock.settimeout(30)
    head = sock.recv(65536).decode("latin-1")
    return int(head.split(" ", 2)[1])


def test_a_body_that_stalls_is_answered_408_after_the_read_deadline(start_proxy):
    proxy = start_proxy(body_read_timeout=0.5)
    sock = _partial(proxy.url, len(BODY), BODY[:10])
    try:
        assert _status(sock) == 408
    finally:
        sock.close()
    assert httpx.post(proxy.url + "/v1/chat/completions", content=BODY,
                      headers={"content-type": "application/json"}).status_code == 200


def test_bodies_in_flight_share_one_byte_budget(start_proxy):
    proxy = start_proxy(max_inflight_body_bytes=100_000, body_read_timeout=30)
    held = _partial(proxy.url, 80_000, b"{")  # declares 80 kB and stalls: 80 kB reserved
    deadline = time.time() + 30
    while proxy.app.state.intake.in_flight < 80_000 and time.time() < deadline:
        time.sleep(0.01)
    try:
        big = json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "x" * 40_000}]})
        r = httpx.post(proxy.url + "/v1/chat/completions", content=big,
                       headers={"content-type": "application/json"})
        assert r.status_code == 503 and r.json()["error"]["code"] == "server_busy"
        assert "retry-after" in r.headers
        small = httpx.post(proxy.url + "/v1/chat/completions", content=BODY,
                           headers={"content-type": "application/json"})
        assert small.status_code == 200  # what fits still goes through
    finally:
        held.close()
    r = httpx.post(proxy.url + "/v1/chat/completions", content=big,
                   headers={"content-type": "application/json"})
    assert r.status_code == 200  # the stalled body's bytes were given back


def test_intake_limits_are_settings_checked_at_start_up():
    settings = load_settings(flags={"max_connections": 50}, env={}, config_path=os.devnull)
    assert server_options(settings)["limit_concurrency"] == 50
    for key, bad in (("max_inflight_body_bytes", 0), ("body_read_timeout", 0), ("max_connections", 0)):
        with pytest.raises(ConfigError, match=key):
            load_settings(flags={key: bad}, env={}, config_path=os.devnull)


def test_a_body_over_rules_max_body_bytes_goes_out_without_running_the_rules(start_proxy, mock):
    from context_engine.rules.fold_duplicates.rule import FoldDuplicates

    seen: list[int] = []

    class Counting(FoldDuplicates):
        async def apply(self, ctx):
            seen.append(len(ctx.messages))
            return await super().apply(ctx)

    from tests.harness import make_deps

    rule = Counting(FoldDuplicates.Config(), make_deps())
    proxy = start_proxy(rules=[rule], rules_max_body_bytes=20_000)
    big = json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "y" * 30_000}]}).encode()
    for content in (BODY, big):
        r = httpx.post(proxy.url + "/v1/chat/completions", content=content,
                       headers={"content-type": "application/json", "authorization": "Bearer k"})
        assert r.status_code == 200
    assert mock.received[-1].body == big and seen == [1]  # the rules ran for the small one only
    row = proxy.rows()[-1]
    assert row["arm"] == "bypass" and json.loads(row["context"])["skipped"] == "rules_max_body_bytes"


def test_a_conversation_over_rules_max_messages_goes_out_without_running_the_rules(start_proxy, mock):
    """50k tiny turns cost more to index than their bytes say: the message count is
    capped too, before any work starts, and the ledger names the cap."""
    from context_engine.rules.fold_duplicates.rule import FoldDuplicates
    from tests.harness import make_deps

    seen: list[int] = []

    class Counting(FoldDuplicates):
        async def apply(self, ctx):
            seen.append(len(ctx.messages))
            return await super().apply(ctx)

    proxy = start_proxy(rules=[Counting(FoldDuplicates.Config(), make_deps())], rules_max_messages=50)
    many = json.dumps({"model": "gpt-4o", "messages": [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"ok {i}"} for i in range(61)]}).encode()
    for content in (BODY, many):
        r = httpx.post(proxy.url + "/v1/chat/completions", content=content,
                       headers={"content-type": "application/json", "authorization": "Bearer k"})
        assert r.status_code == 200
    assert mock.received[-1].body == many and seen == [1]
    row = proxy.rows()[-1]
    assert row["arm"] == "bypass" and json.loads(row["context"])["skipped"] == "rules_max_messages"
    with pytest.raises(ConfigError, match="rules_max_messages"):
        load_settings(flags={"rules_max_messages": 0}, env={}, config_path=os.devnull)
