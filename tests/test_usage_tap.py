"""The usage tap sees the same usage however the stream is split."""

from __future__ import annotations

import gzip
import json

from hypothesis import given
from hypothesis import strategies as st

from proxy.usage_tap import UsageTap

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
    tap = UsageTap(stream=True)
    bounds = [0, *sorted(cuts), len(STREAM)]
    for a, b in zip(bounds, bounds[1:]):
        tap.feed(STREAM[a:b])
    u = tap.close()
    assert (u.prompt_tokens, u.cached_tokens, u.completion_tokens) == (120, 64, 3)
    assert u.finish_reason == "stop" and u.text == "Hello ✓"


def test_gzip_body_is_read_on_the_side():
    body = json.dumps({"choices": [{"message": {"content": "x"}, "finish_reason": "length"}],
                       "usage": {"prompt_tokens": 5, "completion_tokens": 1}}).encode()
    tap = UsageTap("gzip")
    packed = gzip.compress(body)
    tap.feed(packed[:10])
    tap.feed(packed[10:])
    u = tap.close()
    assert (u.prompt_tokens, u.completion_tokens, u.finish_reason) == (5, 1, "length")


def test_unreadable_encoding_is_ignored():
    tap = UsageTap("br")
    tap.feed(b"\x00garbage")
    assert tap.close().prompt_tokens is None
