"""The translation memo (proxy/dialects/memo.py): a request that shares its first items
with an earlier one reuses their translation, and the result is exactly what a fresh
translation gives, for growing histories (item by item, so Responses' assistant runs
grow across requests), retries with a new last item, and any JSON layout."""

from __future__ import annotations

import json

import pytest

from context_engine.bench.wire import OPAQUE_SAMPLES
from context_engine.proxy.dialects.anthropic import request as anthropic
from context_engine.proxy.dialects.anthropic.write import body as to_anthropic
from context_engine.proxy.dialects.memo import KEY, TranslationMemo, last_item_start
from context_engine.proxy.dialects.responses import request as responses
from context_engine.proxy.dialects.responses.write import body as to_responses

MODULES = {"responses": responses, "anthropic": anthropic}
ARRAY = {"responses": "input", "anthropic": "messages"}


def conversation(turns: int = 12) -> list[dict]:
    msgs: list[dict] = [{"role": "system", "content": "You are a careful agent. " * 20}]
    for t in range(turns):
        msgs.append({"role": "user", "content": f"Step {t}: " + "look at the logs, {then} fix it. " * 15})
        msgs.append({"role": "assistant", "content": f"Checking {t}, {{braces}} too." if t % 3 else None,
                     "tool_calls": [{"id": f"call_{t}_{k}", "type": "function",
                                     "function": {"name": "shell",
                                                  "arguments": json.dumps({"cmd": f"grep -n {t}, {{x}}"})}}
                                    for k in range(1 + t % 2)]})
        for k in range(1 + t % 2):
            msgs.append({"role": "tool", "tool_call_id": f"call_{t}_{k}",
                         "content": json.dumps([{"line": n, "text": f"entry {n}, ok"} for n in range(8)])})
    return msgs


def bodies(api: str, indent: int | None) -> list[bytes]:
    """Requests of one conversation: the array growing one element at a time, then
    retries that replace the last element."""
    build = to_responses if api == "responses" else to_anthropic
    full = build("gpt-4o", conversation(), None, OPAQUE_SAMPLES[api])
    items = full[ARRAY[api]]
    out = []
    for n in range(1, len(items) + 1):
        out.append(json.dumps({**full, ARRAY[api]: items[:n]}, indent=indent).encode())
    for n in range(3):
        last = {"role": "user", "content": f"retry {n}"}
        if api == "responses":
            last = {"type": "message", **last}
        out.append(json.dumps({**full, ARRAY[api]: items[:-1] + [last]}, indent=indent).encode())
    return out


@pytest.mark.parametrize("indent", [None, 2])
@pytest.mark.parametrize("api", ["responses", "anthropic"])
def test_memo_gives_the_fresh_translation(monkeypatch, api, indent):
    module = MODULES[api]
    warm = TranslationMemo()
    for raw in bodies(api, indent):
        monkeypatch.setattr(module, "MEMO", TranslationMemo())
        fresh = module.parse(raw)
        monkeypatch.setattr(module, "MEMO", warm)
        got = module.parse(raw)
        assert got.chat == fresh.chat
        messages = [dict(m) for m in got.chat["messages"]]
        assert got.splice(messages) == raw
        if len(messages) > 3:  # a changed message splices the same way
            messages[2] = {**messages[2], "content": "shortened"}
            assert got.splice(messages) == fresh.splice([dict(m) if i != 2 else messages[2]
                                                         for i, m in enumerate(fresh.chat["messages"])])
    assert warm.hits > len(bodies(api, indent)) // 2


def test_memo_skips_short_arrays_and_bodies_it_cannot_rewrite(monkeypatch):
    memo = TranslationMemo()
    monkeypatch.setattr(anthropic, "MEMO", memo)
    short = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    anthropic.parse(json.dumps(short).encode())
    assert len(memo.cache) == 0
    long = {**short, "messages": [{"role": "user", "content": "x" * KEY}] * 3}
    lone = json.dumps(long).replace('"x', '"\\ud800x', 1).encode()
    assert not anthropic.parse(lone).rewritable and len(memo.cache) == 0
    anthropic.parse(json.dumps(long).encode())
    assert len(memo.cache) == 1


def test_last_item_start_finds_the_comma_before_the_last_item():
    items = [{"a": "x, {\"y\": 1}"}, {"b": [1, {"c": ", {"}]}, {"d": "}, {"}]
    for indent in (None, 1):
        text = json.dumps(items, indent=indent)
        end = len(text.rstrip("]\n "))
        comma = last_item_start(text, 0, end, items[-1])
        assert json.loads(text[:comma] + "]") == items[:-1]
    assert last_item_start('[{"a": 1}]', 0, 9, {"a": 1}) is None


def test_memo_stays_within_its_byte_cap(monkeypatch):
    memo = TranslationMemo(max_entries=1000, max_bytes=200_000)
    monkeypatch.setattr(anthropic, "MEMO", memo)
    for n in range(40):  # distinct conversations of ~20 KB each
        msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"{n} {i} " + "w" * 2000}
                for i in range(10)]
        anthropic.parse(json.dumps({"model": "m", "max_tokens": 5, "messages": msgs}).encode())
    assert 0 < memo.cache.bytes <= 200_000 and memo.cache.evicted > 0
