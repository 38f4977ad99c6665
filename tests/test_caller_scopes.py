"""Caller scopes come from every credential a request presents: the client token in
``X-Context-Engine-Token`` (on every API; Gemini's clients have no other way to present
one), each key header the API carries its key in, and the query's ``?key=``. Two callers
who differ in any of them never share a session (nor, so, memory or recall); the same
caller keeps one scope. Whether the rules skip keyless requests the upstream refuses is
decided per scope too."""

from __future__ import annotations

import hashlib
import hmac

import httpx
import pytest

from context_engine.bench.load_mock import Chooser, build_app
from context_engine.proxy.demo.server_thread import ServerThread
from context_engine.proxy.dialects.registry import DIALECTS
from context_engine.proxy.edge.keyless import KeylessRefusals
from context_engine.proxy.engine.session import caller_hash, session_key
from tests.fakes.rules import Counting

TOKEN_A, TOKEN_B = "client-token-alice-0123456789", "client-token-bob-0123456789"
TASK = [{"role": "system", "content": "You are an airline agent."},
        {"role": "user", "content": "Cancel reservation HAT123."}]
BY_NAME = {d.name: d for d in DIALECTS}
KEY = b"team-secret"


def _send(proxy, dialect, headers: dict[str, str], query: str = "") -> None:
    path, body = dialect.write("gemini-2.0-flash" if dialect.name == "gemini" else "gpt-4o",
                               TASK, None)
    r = httpx.post(proxy.url + path + query, content=body,
                   headers={"content-type": "application/json", **headers})
    assert r.status_code == 200, r.text


def _proxy(start_proxy, mock, dialect, **flags):
    upstream = mock.url if dialect.versioned_paths else mock.url + "/v1"
    return start_proxy(upstream=upstream, session_key="team-secret", **flags)


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_two_client_tokens_are_two_scopes_on_every_api(start_proxy, mock, name):
    dialect = BY_NAME[name]
    proxy = _proxy(start_proxy, mock, dialect, client_tokens=f"{TOKEN_A},{TOKEN_B}")
    for token in (TOKEN_A, TOKEN_B, TOKEN_A):
        _send(proxy, dialect, {"x-context-engine-token": token})
    sessions = [row["session"] for row in proxy.rows()]
    assert sessions[0] == sessions[2] != sessions[1]
    assert all("x-context-engine-token" not in r.headers for r in mock.received[-3:])


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_a_client_token_beside_the_same_key_is_another_scope(start_proxy, mock, name):
    dialect = BY_NAME[name]
    proxy = _proxy(start_proxy, mock, dialect)
    key = {dialect.key_headers[0]: "Bearer sk-shared"}
    for token in (TOKEN_A, TOKEN_B):
        _send(proxy, dialect, {**key, "x-context-engine-token": token})
    _send(proxy, dialect, key)
    assert len({row["session"] for row in proxy.rows()}) == 3


@pytest.mark.parametrize(("name", "header"), [("anthropic", "x-api-key"), ("chat", "api-key"),
                                              ("gemini", "x-goog-api-key")])
def test_the_same_dummy_authorization_with_different_real_keys_is_two_scopes(
        start_proxy, mock, name, header):
    dialect = BY_NAME[name]
    proxy = _proxy(start_proxy, mock, dialect)
    for real in ("sk-alice", "sk-bob", "sk-alice"):
        _send(proxy, dialect, {"authorization": "Bearer dummy", header: real})
    sessions = [row["session"] for row in proxy.rows()]
    assert sessions[0] == sessions[2] != sessions[1]


def test_the_gemini_query_key_scopes_beside_a_header(start_proxy, mock):
    dialect = BY_NAME["gemini"]
    proxy = _proxy(start_proxy, mock, dialect)
    for real in ("k-alice", "k-bob", "k-alice"):
        _send(proxy, dialect, {"x-goog-api-key": "shared"}, f"?key={real}")
    _send(proxy, dialect, {"x-goog-api-key": "shared"})
    sessions = [row["session"] for row in proxy.rows()]
    assert sessions[0] == sessions[2] and len(set(sessions)) == 3


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
def test_the_scope_covers_every_credential_canonically(dialect):
    header = dialect.key_headers[0]
    one = dialect.credential({header: "sk-a"}, "")
    assert one == "sk-a"  # a single key scopes as it did: its value alone
    both = {header: "sk-a", "x-context-engine-token": TOKEN_A}
    assert dialect.credential(both, "") == dialect.credential(dict(reversed(both.items())), "")
    assert dialect.credential(both, "") != dialect.credential({**both, header: "sk-b"}, "")
    assert dialect.credential(both, "") != one
    assert dialect.credential({"x-context-engine-token": TOKEN_A}, "") == TOKEN_A


def test_a_single_key_keeps_its_session_ids():
    scope = caller_hash({"authorization": "Bearer sk-alice"}, KEY)
    assert scope == hmac.new(KEY, b"Bearer sk-alice", hashlib.sha256).hexdigest()
    assert caller_hash({"x-context-engine-token": TOKEN_A}, KEY) != caller_hash({}, KEY)
    assert caller_hash({"authorization": "Bearer x", "x-api-key": "sk-bob"}, KEY) != \
        caller_hash({"authorization": "Bearer x", "x-api-key": "sk-eve"}, KEY)
    assert session_key("team-secret", "memory://") == KEY


def test_one_scope_refused_keeps_the_rules_for_another(start_proxy):
    rule = Counting()
    with ServerThread(build_app(0.0, Chooser({}, 1))) as upstream:  # 401 without a key
        proxy = start_proxy(rules=[rule], upstream=upstream.url + "/v1",
                            client_tokens=f"{TOKEN_A},{TOKEN_B}")
        url = proxy.url + "/v1/chat/completions"
        body = {"model": "gpt-4o", "messages": TASK}
        for _ in range(3):  # the client token is stripped: keyless upstream-side
            assert httpx.post(url, json=body, headers={"x-context-engine-token": TOKEN_A}
                              ).status_code == 401
        assert rule.seen == 1  # refused once: A's later ones skip the rules
        assert httpx.post(url, json=body, headers={"x-context-engine-token": TOKEN_B}
                          ).status_code == 401
        assert rule.seen == 2  # B was never refused: its rules ran


def test_refused_scopes_are_remembered_up_to_a_bound():
    keyless = KeylessRefusals(max_scopes=3)
    for scope in ("a", "b", "c", "d"):
        keyless.observe(scope, False, 401)
    assert not keyless.skip("a", False)  # the oldest was forgotten
    assert all(keyless.skip(s, False) for s in ("b", "c", "d"))
    assert not keyless.skip("b", True)  # a request with a key always gets the rules
    keyless.observe("b", False, 200)
    assert not keyless.skip("b", False)
    keyless.observe("c", True, 401)  # a refused key says nothing about keyless requests
    assert keyless.skip("c", False)
