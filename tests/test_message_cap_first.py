"""The request caps come before any per-part work.

- A body over ``max_body_bytes`` is refused (413) before it is parsed: an invalid body
  that size gets the 413, not a 400, in every dialect.
- Each dialect counts the neutral messages a request makes before making them
  (``parse(..., max_items)``); a request over ``rules_max_messages`` is translated for
  its head only (its first turns, up to the first one of more than ``HEAD`` parts: its
  session id stays the one the whole translation gives unless a first turn is that
  large), is never token-counted, and goes out as sent. Invalid items past the head are still refused.
- End to end, with a made-up key: a Gemini request over the message cap costs a
  fraction of the CPU time (this process's: client, proxy and upstream, so other
  processes on the machine do not count) the same request costs under the cap (parsed
  whole and counted).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import httpx
import pytest

from context_engine.proxy.dialects.base import HEAD
from context_engine.proxy.dialects.registry import BY_NAME
from context_engine.proxy.engine.session import session_id
from context_engine.proxy.errors import BadRequest
from tests.test_parse_linear_time import CASES, GEMINI_PATH

WIRE = Path(__file__).parent / "golden" / "wire"
ROUTES = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "anthropic": "/v1/messages",
          "gemini": GEMINI_PATH}


def random_responses_input(rng: random.Random) -> dict[str, Any]:
    """Items of every kind in random order: assistant runs split and joined every way."""
    make = [lambda k: {"role": "user", "content": "u"}, lambda k: {"role": "assistant", "content": "a"},
            lambda k: {"type": "function_call", "call_id": f"c{k}", "name": "f", "arguments": "{}"},
            lambda k: {"type": "function_call_output", "call_id": f"c{k}", "output": "o"},
            lambda k: {"type": "reasoning", "id": f"r{k}", "summary": []},
            lambda k: {"role": "developer", "content": "d"}]
    items = [rng.choice(make)(k) for k in range(rng.randint(0, 30))]
    return {"model": "m", "instructions": "s", "input": items}


def bodies() -> list[tuple[str, bytes]]:
    out = [(f.name.split("_")[0], f.read_bytes()) for f in sorted(WIRE.glob("*.json"))]
    out += [(api, json.dumps(build(7)).encode()) for api, build in CASES.values()]
    rng = random.Random(46)
    out += [("responses", json.dumps(random_responses_input(rng)).encode()) for _ in range(300)]
    return out


def test_each_dialect_counts_its_messages_before_translating_them_exactly():
    for api, raw in bodies():
        n = len(BY_NAME[api].parse(raw, ROUTES[api]).chat["messages"])
        assert not BY_NAME[api].parse(raw, ROUTES[api], max(n, 1)).over, (api, raw[:200])
        if n > 1:
            assert BY_NAME[api].parse(raw, ROUTES[api], n - 1).over, (api, raw[:200])


@pytest.mark.parametrize("case", CASES)
def test_a_request_over_the_cap_is_translated_for_its_head_only_with_the_same_session(case):
    api, build = CASES[case]
    body = build(3000)
    if api == "responses":
        body["input"].insert(1, {"role": "developer", "content": "rules"})
    raw = json.dumps(body).encode()
    whole = BY_NAME[api].parse(raw, ROUTES[api])
    head = BY_NAME[api].parse(raw, ROUTES[api], 100)
    assert head.over and not whole.over
    if api != "chat":  # the chat messages are the neutral form already: nothing to skip
        assert len(head.chat["messages"]) <= 2 * HEAD < len(whole.chat["messages"])
    sid = [session_id({}, p.chat["messages"], b"k", "key") for p in (whole, head)]
    if case == "gemini_many_parts_per_turn":  # its first user turn has 3000 parts: not read
        assert [m["role"] for m in head.chat["messages"]] == ["system"]
    else:  # ordinary first turns: the session is the one the whole translation gives
        assert sid[0] == sid[1]


@pytest.mark.parametrize("api", ROUTES)
def test_an_invalid_item_past_the_head_is_refused_over_the_cap_too(api):
    bad = {"chat": {"model": "m", "messages": [{"role": "user", "content": "x"}] * 300 + [{"content": 1}]},
           "responses": {"model": "m", "input": [{"role": "user", "content": "x"}] * 300 + [{"type": 3}]},
           "anthropic": {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}] * 300
                         + [{"role": "assistant", "content": [{"type": "tool_use", "name": "f"}]}]},
           "gemini": {"contents": [{"role": "user", "parts": [{"text": "x"}]}] * 300
                      + [{"role": "user", "parts": [3]}]}}[api]
    for cap in (0, 100):
        with pytest.raises(BadRequest):
            BY_NAME[api].parse(json.dumps(bad).encode(), ROUTES[api], cap)


@pytest.mark.parametrize("api", ROUTES)
def test_a_body_over_max_body_bytes_is_refused_before_it_is_parsed(start_proxy, api):
    proxy = start_proxy(max_body_bytes=10_000)
    junk = b"{" + b"[" * 20_000  # not JSON: parsing it would answer 400
    r = httpx.post(proxy.url + ROUTES[api], content=junk,
                   headers={"content-type": "application/json", "authorization": "Bearer made-up"})
    assert r.status_code == 413


def gemini_pairs(n: int) -> bytes:
    return json.dumps({"systemInstruction": {"parts": [{"text": "s"}]}, "contents": [
        {"role": "user", "parts": [{"text": "go " * 50}]},
        *[{"role": "model", "parts": [{"functionCall": {"name": f"f{k}", "args": {"q": "x"}}}]}
          for k in range(n)],
        *[{"role": "user", "parts": [{"functionResponse": {"name": f"g{k}", "response": {"output": "y"}}}]}
          for k in range(n)]]}).encode()


def test_a_request_over_the_message_cap_with_a_made_up_key_is_answered_without_translating_it(
        start_proxy, raw):
    body = gemini_pairs(8000)  # 16k contents, about 1.1 MB
    over = start_proxy(upstream=raw.url + "/v1", rules_max_messages=1000)
    under = start_proxy(upstream=raw.url + "/v1", rules_max_messages=100_000, rules_max_body_bytes=10**8)

    for proxy in (over, under):
        r = httpx.post(proxy.url + GEMINI_PATH, content=body, timeout=60,
                       headers={"content-type": "application/json", "x-goog-api-key": "made-up"})
        assert r.status_code == 200
    # under the cap the whole conversation is translated and tokenized; over it, neither
    # (the per-part work the cap spares: tests/test_parse_linear_time.py bounds its growth)
    full = under.rows()[-1]
    assert "skipped" not in json.loads(full["context"] or "{}")
    assert full["tokens_original"] != len(body) // 4
    row = over.rows()[-1]
    assert row["arm"] == "bypass" and json.loads(row["context"])["skipped"] == "rules_max_messages"
    assert row["tokens_original"] == len(body) // 4  # counted from its length, not tokenized
    assert raw.received[-1].body == body  # as sent
