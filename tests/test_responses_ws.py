"""The Responses API over a WebSocket: a real ``websockets`` client, the proxy under uvicorn
and the mock's WebSocket side (``proxy.demo.mock_ws``). Events arrive byte for byte, turns
go up rewritten as an HTTP POST would, one ledger row per turn with the upstream's usage,
``context_recall`` is answered inside (faults: tests/test_responses_ws_faults.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect

from context_engine.proxy.demo.mock_upstream import ServerThread
from context_engine.proxy.demo.mock_ws import MockWsUpstream
from context_engine.proxy.edge.app import create_app
from context_engine.proxy.engine.engine import Engine
from context_engine.proxy.recording.ledger import read_rows
from context_engine.proxy.settings import load_settings
from context_engine.proxy.store.stores import MemoryStore
from tests.fakes.recall_ws_upstream import RecallWsUpstream
from tests.test_recall import LINES

KEY = {"Authorization": "Bearer sk-ws-test", "OpenAI-Beta": "responses_websockets=2026-02-06"}
LONG = "\n".join(f"line {i}: value {i * 13 % 97} ok" for i in range(400))
ENDS = ("response.completed", "response.incomplete", "response.failed", "error")


def first_turn(model: str = "gpt-4o") -> dict[str, Any]:
    return {"model": model, "instructions": "You are terse.", "input": [
        {"role": "user", "content": "Read the log."},
        {"type": "function_call", "call_id": "call_1", "name": "read_log", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": LONG},
        {"role": "user", "content": "What does line 7 say?"}], "stream": True, "store": False}


def second_turn(previous: str) -> dict[str, Any]:
    return {"model": "gpt-4o", "previous_response_id": previous,
            "input": [{"role": "user", "content": "And line 8?"}], "stream": True, "store": False}


def create(body: dict[str, Any]) -> str:
    return json.dumps({"type": "response.create", **body}, separators=(",", ":"))


@contextlib.contextmanager
def proxy_for(upstream_url: str, tmp_path: Path, name: str = "ledger",
              **flags: Any) -> Iterator[tuple[ServerThread, Any]]:
    flags = {"store": "memory://", "ledger": str(tmp_path / f"{name}.db"), "rules": "tool_json",
             "rule_options": {"tool_json": {"max_chars": 400}}, "rules_deadline_ms": 0,
             "upstream": upstream_url + "/v1", **flags}
    settings = load_settings(flags=flags, env={}, config_path=os.devnull)
    app = create_app(settings, engine=Engine(settings, store=MemoryStore()))
    with ServerThread(app) as proxy:
        yield proxy, app


def rows(app: Any) -> list[dict[str, Any]]:
    deadline = time.time() + 20
    while app.state.finisher.unfinished and time.time() < deadline:
        time.sleep(0.01)
    app.state.ledger.flush()
    return read_rows(app.state.ledger.path)


def ws(proxy: ServerThread, **kw: Any) -> Any:
    return connect(proxy.url.replace("http://", "ws://") + "/v1/responses",
                   additional_headers=kw.pop("headers", KEY), **kw)


async def turn(conn: ClientConnection, message: str) -> list[str]:
    """Send one message; the events up to the turn's end, as received."""
    await conn.send(message)
    got: list[str] = []
    while not got or json.loads(got[-1]).get("type") not in ENDS:
        got.append(str(await conn.recv()))
    return got


def completed(events: list[str]) -> dict[str, Any]:
    last: dict[str, Any] = json.loads(events[-1])
    assert last["type"] == "response.completed"
    return last["response"]


def ws_messages(mock: MockWsUpstream) -> list[bytes]:
    return [r.body for r in mock.received if r.method == "WS"]


def test_turns_relay_byte_for_byte_go_up_rewritten_and_make_one_row_each(tmp_path):
    mock = MockWsUpstream()
    with mock, proxy_for(mock.url, tmp_path) as (proxy, app):
        async def talk() -> tuple[list[str], list[str], str | None]:
            async with ws(proxy, subprotocols=["realtime"]) as conn:
                one = await turn(conn, create(first_turn()))
                two = await turn(conn, create(second_turn(completed(one)["id"])))
                return one, two, conn.subprotocol

        one, two, subprotocol = asyncio.run(talk())
        every = rows(app)
    assert one + two == mock.sent  # every event, the same text, in order
    assert subprotocol == "realtime"
    handshake = next(r for r in mock.received if r.method == "WS").headers
    assert handshake["authorization"] == "Bearer sk-ws-test"
    assert handshake["openai-beta"] == "responses_websockets=2026-02-06"
    sent_one, sent_two = (json.loads(b) for b in ws_messages(mock))
    assert next(iter(sent_one)) == "type" and sent_one["type"] == "response.create"
    output = sent_one["input"][2]["output"]
    assert len(output) < len(LONG) / 2 and "line 200:" not in output  # tool_json clipped it
    assert sent_two["previous_response_id"] == "resp_ws_1"
    assert [r["status"] for r in every] == [200, 200] and {r["api"] for r in every} == {"responses"}
    for row, events in zip(every, (one, two)):
        usage = completed(events)["usage"]
        assert row["prompt_tokens"] == usage["input_tokens"]
        assert row["cached_tokens"] == usage["input_tokens_details"]["cached_tokens"]
        assert row["completion_tokens"] == usage["output_tokens"]
    assert every[0]["tokens_sent"] < every[0]["tokens_original"]


def test_a_conversation_goes_up_the_same_over_http_and_websocket(tmp_path):
    """The same two turns, once as HTTP POSTs and once on a socket, each through a fresh
    proxy to a fresh mock: the upstream gets the same bytes (the WebSocket's ``type``
    member aside) and the ledger the same rows (server-held state priced as such)."""
    bodies = [first_turn(), second_turn("resp_ws_1")]
    mock = MockWsUpstream()
    with mock, proxy_for(mock.url, tmp_path, "http") as (proxy, app):
        for body in bodies:
            r = httpx.post(proxy.url + "/v1/responses", content=json.dumps(body, separators=(",", ":")),
                           headers={**KEY, "content-type": "application/json"}, timeout=30)
            assert r.status_code == 200 and "response.completed" in r.text
        http_sent = [r.body for r in mock.received if r.method == "POST"]
        http_rows = rows(app)
    mock = MockWsUpstream()
    with mock, proxy_for(mock.url, tmp_path, "ws") as (proxy, app):
        async def talk() -> None:
            async with ws(proxy) as conn:
                for body in bodies:
                    await turn(conn, create(body))

        asyncio.run(talk())
        ws_sent = ws_messages(mock)
        ws_rows = rows(app)
    framing = b'"type":"response.create",'
    assert all(m.startswith(b"{" + framing) for m in ws_sent)
    assert [m.replace(framing, b"", 1) for m in ws_sent] == http_sent
    assert LONG.encode() not in http_sent[0]  # it was rewritten, the same way on both
    same = ("tokens_original", "tokens_sent", "cached_tokens", "session", "est_cached_original",
            "est_cached_sent", "billing", "arm", "rule_savings", "status")
    assert [{k: r[k] for k in same} for r in ws_rows] == [{k: r[k] for k in same} for r in http_rows]
    # the mock's HTTP side holds no responses: it bills the second turn's new input only
    assert ws_rows[0]["prompt_tokens"] == http_rows[0]["prompt_tokens"]


R_TOOLS = [{"type": "function", "name": "lookup", "description": "Look up a fact.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}]


def test_context_recall_is_answered_inside_the_proxy_and_the_chain_continues(tmp_path):
    body = {"model": "recall-id", "input": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Check the sensors."},
        {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": LINES},
        {"role": "user", "content": "What did sensor-100 read?"}],
        "tools": R_TOOLS, "stream": True, "store": False}
    up = RecallWsUpstream()
    with up, proxy_for(up.url, tmp_path, rule_options={
            "tool_json": {"max_chars": 600}}) as (proxy, app):
        async def talk() -> tuple[list[str], list[str]]:
            async with ws(proxy) as conn:
                one = await turn(conn, create(body))
                nxt = {"model": "plain", "previous_response_id": completed(one)["id"], "tools": R_TOOLS,
                       "input": [{"role": "user", "content": "Thanks."}], "stream": True, "store": False}
                return one, await turn(conn, create(nxt))

        one, two = asyncio.run(talk())
        every = rows(app)
    first, follow, after = up.messages
    assert [t["name"] for t in first["tools"]] == ["lookup", "context_recall"]
    assert follow["input"][-1]["type"] == "function_call_output"
    assert "row 100: sensor-100" in follow["input"][-1]["output"]
    final = completed(one)
    assert final["id"] == "resp_1"  # the client sees one response, under the first id
    assert "context_recall" not in "".join(one)
    assert "I read: " in json.dumps(final["output"])
    assert final["usage"]["input_tokens"] == sum(
        json.loads(e)["response"]["usage"]["input_tokens"] for e in up.sent[:-len(two)]
        if json.loads(e)["type"] == "response.completed")
    assert after["previous_response_id"] == "resp_2"  # the response the upstream holds it all under
    assert completed(two)["status"] == "completed"
    assert every[0]["recall_rounds"] == 1 and every[0]["status"] == 200 and len(every) == 2



def test_a_socket_through_deploys_nginx_reaches_a_replica(tmp_path):
    """deploy/nginx.conf upgrades a WebSocket through to the replica (and keeps plain
    requests working): a turn through nginx relays as it does straight to the proxy."""
    from context_engine.bench.fleet import Nginx, nginx_bin
    from tests.conftest import _service

    def need_nginx() -> None:
        if nginx_bin() is None:
            raise FileNotFoundError("nginx is not installed (apt-get install nginx)")

    _service("nginx", need_nginx)  # skip here (fail in CI) without nginx
    mock = MockWsUpstream()
    with mock, proxy_for(mock.url, tmp_path) as (proxy, app), Nginx([proxy.port]) as nginx:
        async def talk() -> list[str]:
            async with connect(nginx.url.replace("http://", "ws://") + "/v1/responses",
                               additional_headers=KEY) as conn:
                return await turn(conn, create(first_turn()))

        events = asyncio.run(talk())
        assert httpx.get(nginx.url + "/healthz").status_code == 200
        every = rows(app)
    assert events == mock.sent and completed(events)["status"] == "completed"
    assert [r["status"] for r in every] == [200]
