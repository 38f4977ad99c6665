"""The usage tap sees the same usage however the stream is split."""

from __future__ import annotations

import gzip
import json

from hypothesis import given
from hypothesis import strategies as st

from context_engine.proxy.dialects.anthropic import ANTHROPIC
from context_engine.proxy.dialects.chat import CHAT
from context_engine.proxy.dialects.registry import DIALECTS
from context_engine.proxy.transport.usage_tap import UsageTap

EVENTS = [
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}, "finish_reason": None}]},
    {"choices": [{"index": 0, "delta": {"content": "lo ✓"}, "finish_reason": None}]},
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    {"choices": [], "usage": {"prompt_tokens": 120, "completion_tokens": 3,
                              "prompt_tokens_details": {"cached_tokens": 64}}},
]
STREAM = b"".join(b"data: " + json.dumps(e, ensure_ascii=False).encode() + b"\r\n\r\n" for e in EVENTS) + b"data: [DONE]\n\n"


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=30))
def test_random_splits_give_identical_usage(cuts):
    tap = UsageTap(CHAT, stream=True)
    bounds = [0, *sorted(cuts), len(STREAM)]
    for a, b in zip(bounds, bounds[1:]):
        tap.feed(STREAM[a:b])
    u = tap.close()
    assert (u.prompt_tokens, u.cached_tokens, u.completion_tokens) == (120, 64, 3)
    assert u.finish_reason == "stop" and u.text == "Hello ✓"


def test_gzip_body_is_read_on_the_side():
    body = json.dumps({"choices": [{"message": {"content": "x"}, "finish_reason": "length"}],
                       "usage": {"prompt_tokens": 5, "completion_tokens": 1}}).encode()
    tap = UsageTap(CHAT, "gzip")
    packed = gzip.compress(body)
    tap.feed(packed[:10])
    tap.feed(packed[10:])
    u = tap.close()
    assert (u.prompt_tokens, u.completion_tokens, u.finish_reason) == (5, 1, "length")


def test_unreadable_encoding_is_ignored():
    tap = UsageTap(CHAT, "br")
    tap.feed(b"\x00garbage")
    assert tap.close().prompt_tokens is None


# Anthropic's example of server-side compaction: the top level shows the last step only
ITERATED = {"input_tokens": 23000, "output_tokens": 1000, "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 0,
            "iterations": [{"type": "compaction", "input_tokens": 180000, "output_tokens": 3500,
                            "cache_read_input_tokens": 4000, "cache_creation_input_tokens": 0},
                           {"type": "message", "input_tokens": 23000, "output_tokens": 1000,
                            "cache_read_input_tokens": 0, "cache_creation_input_tokens": 2000}]}


def _sse(events):
    return b"".join(b"event: " + e["type"].encode() + b"\ndata: " + json.dumps(e).encode() + b"\n\n"
                    for e in events)


def test_anthropic_iterations_are_summed_in_a_body_and_in_a_stream():
    tap = UsageTap(ANTHROPIC)
    tap.feed(json.dumps({"type": "message", "content": [], "stop_reason": "end_turn",
                         "usage": ITERATED}).encode())
    body = tap.close()
    start = {"type": "message_start", "message": {"type": "message", "content": [], "usage": {
        "input_tokens": 23000, "output_tokens": 1}}}
    delta = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": ITERATED}
    late = {"type": "message_delta", "delta": {}, "usage": {"output_tokens": 1000}}
    for events in ([start, delta], [start, delta, late]):
        tap = UsageTap(ANTHROPIC, stream=True)
        tap.feed(_sse(events))
        stream = tap.close()
        for u in (body, stream):
            assert u.prompt_tokens == 180000 + 4000 + 23000 + 2000
            assert (u.cached_tokens, u.cache_write_tokens, u.completion_tokens) == (4000, 2000, 4500)


def test_anthropic_usage_without_iterations_is_read_as_it_is():
    tap = UsageTap(ANTHROPIC)
    tap.feed(json.dumps({"type": "message", "usage": {**ITERATED, "iterations": []}}).encode())
    u = tap.close()
    assert (u.prompt_tokens, u.cached_tokens, u.cache_write_tokens, u.completion_tokens) == (
        23000, 0, 0, 1000)


# --- malformed upstream JSON: any value where the API puts an object, a list or a count --

ODD = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True),
                st.text(max_size=5), st.lists(st.integers(), max_size=2),
                st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
SHAPES = [
    lambda v: {"choices": v},
    lambda v: {"choices": [v]},
    lambda v: {"choices": [{"delta": v, "finish_reason": v}]},
    lambda v: {"choices": [{"message": {"content": v}}], "usage": {"prompt_tokens": v}},
    lambda v: {"usage": {"prompt_tokens": 3, "prompt_tokens_details": v, "cache_creation_input_tokens": v}},
    lambda v: {"object": "response", "status": v, "output": v, "usage": v},
    lambda v: {"object": "response", "status": "incomplete", "incomplete_details": v},
    lambda v: {"object": "response", "status": "completed", "output": [v, {"content": v}]},
    lambda v: {"type": "response.completed", "response": {"usage": {"input_tokens_details": v}}},
    lambda v: {"type": "response.output_text.delta", "delta": v},
    lambda v: {"type": "message", "content": v, "usage": v, "stop_reason": v},
    lambda v: {"type": "message", "content": [v, {"type": "text", "text": v}]},
    lambda v: {"type": "message_start", "message": {"usage": {"input_tokens": v, "iterations": [v]}}},
    lambda v: {"type": "message_delta", "delta": v, "usage": {"output_tokens": v}},
    lambda v: {"type": "content_block_delta", "delta": v},
]


@given(st.sampled_from(range(len(SHAPES))), ODD)
def test_malformed_usage_and_reply_shapes_never_raise(shape, value):
    obj = SHAPES[shape](value)
    body = json.dumps(obj).encode()
    for dialect in DIALECTS:
        tap = UsageTap(dialect)
        tap.feed(body)
        tap.close()
        stream = UsageTap(dialect, stream=True)
        stream.feed(b"data: " + body + b"\n\n")
        stream.close()
