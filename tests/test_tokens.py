"""Offline token counting with real tiktoken encodings from the litellm wheel."""

from __future__ import annotations

import asyncio

from context_engine.proxy.engine.engine import Engine
from context_engine.proxy.engine.tokens import (
    TokenCounter,
    counter_for_model,
    encoding_for_model,
    get_encoding,
)
from context_engine.proxy.settings import load_settings
from context_engine.proxy.store.stores import MemoryStore


def test_known_models_map_to_their_encodings():
    assert encoding_for_model("gpt-4o") == ("o200k_base", False)
    assert encoding_for_model("gpt-4o-mini-2024-07-18") == ("o200k_base", False)
    assert encoding_for_model("gpt-5") == ("o200k_base", False)
    assert encoding_for_model("o3-mini") == ("o200k_base", False)
    assert encoding_for_model("gpt-4") == ("cl100k_base", False)
    assert encoding_for_model("gpt-3.5-turbo") == ("cl100k_base", False)
    assert encoding_for_model("claude-sonnet-4") == ("o200k_base", True)


def test_encodings_load_offline_and_differ():
    text = "Context engineering: 上下文工程 — tokens!"
    o200k = get_encoding("o200k_base").encode_ordinary(text)
    cl100k = get_encoding("cl100k_base").encode_ordinary(text)
    assert o200k != cl100k
    assert get_encoding("o200k_base").decode(o200k) == text


def test_message_count_follows_the_cookbook_recipe():
    counter, _ = counter_for_model("gpt-4")
    msgs = [{"role": "system", "content": "You are helpful."},
            {"role": "user", "content": "Hello there", "name": "bob"}]
    enc = get_encoding("cl100k_base")
    expected = (3 + len(enc.encode("system")) + len(enc.encode("You are helpful.")) +
                3 + len(enc.encode("user")) + len(enc.encode("Hello there")) +
                1 + len(enc.encode("bob")) + 3)
    assert counter.messages(msgs) == expected


def test_tools_and_tool_calls_are_counted():
    c = TokenCounter("o200k_base")
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}]}
    assert c.message(call) > c.message({"role": "assistant", "content": None})
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    assert c.request([call], tools) > c.request([call])


def test_unknown_model_falls_back_to_o200k_and_is_noted():
    engine = Engine(load_settings(flags={"rules": ""}, env={}, config_path="/dev/null"), store=MemoryStore())
    rw = asyncio.run(engine.rewrite({"model": "mystery-model", "messages": [{"role": "user", "content": "hi"}]}, "s"))
    assert rw.encoding == "o200k_base" and rw.encoding_fallback
    rw = asyncio.run(engine.rewrite({"model": "gpt-4", "messages": [{"role": "user", "content": "hi"}]}, "s"))
    assert rw.encoding == "cl100k_base" and not rw.encoding_fallback
