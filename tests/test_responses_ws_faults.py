"""Faults on the Responses WebSocket stay faults, and bad input gets the API's errors: an
upstream close mid-turn, an upstream ``error`` event, a client that leaves, messages the
dialect rejects, a refused handshake, and the edge's guards (client tokens, Origin, Host)
on the handshake. The same client, proxy and mock as tests/test_responses_ws.py."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus

from context_engine.proxy.demo.mock_ws import MockWsUpstream
from tests.test_responses_ws import (
    KEY,
    completed,
    create,
    first_turn,
    proxy_for,
    rows,
    turn,
    ws,
    ws_messages,
)


def test_an_upstream_close_mid_turn_reaches_the_client_as_an_error(tmp_path):
    mock = MockWsUpstream()
    with mock, proxy_for(mock.url, tmp_path) as (proxy, app):
        async def talk() -> tuple[list[str], int | None]:
            got: list[str] = []
            async with ws(proxy) as conn:
                await conn.send(create(first_turn("mock-ws-close")))
                try:
                    while True:
                        got.append(str(await conn.recv()))
                except ConnectionClosed as exc:
                    return got, exc.rcvd.code if exc.rcvd else None
            return got, 1000

        got, code = asyncio.run(talk())
        [row] = rows(app)
    assert got == mock.sent and len(got) == 3  # what came before the close, as it came
    assert code == 1011  # the upstream closed cleanly mid-response: an error to the client
    assert row["status"] == 502 and "upstream closed the WebSocket mid-response" in row["error"]


def test_a_client_that_leaves_mid_turn_closes_the_upstream_socket(tmp_path):
    mock = MockWsUpstream()
    with mock, proxy_for(mock.url, tmp_path) as (proxy, app):
        async def talk() -> str:
            async with ws(proxy) as conn:
                await conn.send(create(first_turn("mock-ws-stall")))
                return str(await conn.recv())  # then it leaves

        first = asyncio.run(talk())
        deadline = time.time() + 10
        while not mock.closed and time.time() < deadline:
            time.sleep(0.01)
        [row] = rows(app)
    assert [first] == mock.sent and mock.closed == [1000]  # the client's own close code
    assert row["error"] == "client_disconnected"


def test_an_upstream_error_event_ends_the_turn_and_the_socket_lives(tmp_path):
    mock = MockWsUpstream()
    with mock, proxy_for(mock.url, tmp_path) as (proxy, app):
        async def talk() -> tuple[list[str], list[str]]:
            async with ws(proxy) as conn:
                return (await turn(conn, create(first_turn("mock-ws-error"))),
                        await turn(conn, create(first_turn())))

        failed, fine = asyncio.run(talk())
        every = rows(app)
    assert failed == mock.sent[:1] and json.loads(failed[0])["status"] == 500
    assert completed(fine)["status"] == "completed"
    assert [(r["status"], r["error"]) for r in every] == [(500, "boom"), (200, "")]


def test_bad_messages_get_error_events_and_never_go_up(tmp_path):
    mock = MockWsUpstream()
    with mock, proxy_for(mock.url, tmp_path) as (proxy, app):
        async def talk() -> list[dict[str, Any]]:
            async with ws(proxy) as conn:
                got = [json.loads(e) for m in ("not json", "[1]", '{"type": 5}',
                                                '{"type":"response.create","input":5}')
                       for e in await turn(conn, m)]
                got.append(completed(await turn(conn, create(first_turn()))))
                return got

        got = asyncio.run(talk())
        every = rows(app)
    errors, done = got[:4], got[4]
    assert all(e["type"] == "error" and e["status"] == 400 and
               e["error"]["type"] == "invalid_request_error" for e in errors)
    assert errors[3]["error"]["param"] == "input"
    assert done["status"] == "completed"
    assert len(ws_messages(mock)) == 1 and len(every) == 1  # only the good turn went up


def test_a_refused_handshake_reaches_the_client_as_it_came(tmp_path):
    mock = MockWsUpstream()
    with mock, proxy_for(mock.url, tmp_path) as (proxy, _):
        async def talk() -> Any:
            with pytest.raises(InvalidStatus) as refused:
                async with ws(proxy, headers={"Authorization": "Bearer sk-invalid"}):
                    pass
            return refused.value.response

        response = asyncio.run(talk())
    assert response.status_code == 401
    assert json.loads(response.body)["error"]["code"] == "invalid_api_key"


def test_the_edge_guards_cover_sockets(tmp_path):
    """Client tokens, the Origin check and the Host check refuse a socket as they refuse
    a POST; a socket with the token opens, and the token never goes upstream."""
    token = "ce-" + "t" * 40
    mock = MockWsUpstream()
    with mock, proxy_for(mock.url, tmp_path, client_tokens=token) as (proxy, _):
        async def status(**headers: str) -> int:
            try:
                async with ws(proxy, headers={**KEY, **headers}) as conn:
                    await turn(conn, create(first_turn()))
                    return 101
            except InvalidStatus as exc:
                return exc.response.status_code

        async def talk() -> list[int]:
            return [await status(), await status(**{"X-Context-Engine-Token": token}),
                    await status(**{"X-Context-Engine-Token": token, "Origin": "https://evil.example"})]

        codes = asyncio.run(talk())
        rebound = httpx.get(proxy.url + "/v1/responses", headers={  # a handshake for another Host
            "Host": "evil.example", "Upgrade": "websocket", "Connection": "Upgrade",
            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version": "13",
            "X-Context-Engine-Token": token})
    assert codes == [401, 101, 403] and rebound.status_code == 400
    [opened] = [r for r in mock.received if r.method == "WS"]
    assert opened.headers["authorization"] == "Bearer sk-ws-test"
    assert "x-context-engine-token" not in opened.headers
