"""Memory stays bounded: content-keyed caches have entry and byte caps, the shadow backlog
drops and counts, per-session structures are capped."""

from __future__ import annotations

import concurrent.futures
import json
import threading
import time
import uuid

import httpx

from context_engine.proxy.engine import tokens
from context_engine.proxy.engine.tokens import TokenCounter, get_encoding
from context_engine.proxy.recording.context_metrics import Oscillation
from context_engine.proxy.store.memo import BoundedCache, memoize
from context_engine.rules.fold_duplicates.patterns import normalize
from tests.fakes.rules import Slow


def test_bounded_cache_keeps_both_caps_and_evicts_least_recent_first():
    cache: BoundedCache[str, str] = BoundedCache(max_entries=5, max_bytes=2_000)
    for i in range(5):
        cache.put(f"k{i}", "v" * 10)
    cache.get("k0")  # now the most recent
    cache.put("k5", "v")
    assert cache.keys() == ["k2", "k3", "k4", "k0", "k5"] and cache.evicted == 1
    cache.put("big", "x" * 1_500)  # pushes out by bytes
    assert cache.bytes <= 2_000 and cache.keys()[-1] == "big" and len(cache) < 5
    cache.put("huge", "x" * 5_000)  # larger than the cap: not kept
    assert cache.get("huge") is None and cache.bytes <= 2_000


def test_memoize_caps_long_texts_by_bytes():
    calls = []

    @memoize(max_entries=1_000, max_bytes=100_000)
    def upper(text: str) -> str:
        calls.append(text)
        return text.upper()

    texts = [uuid.uuid4().hex * 500 for _ in range(50)]  # 16 kB each, 800 kB in all
    for t in texts:
        assert upper(t) == t.upper()
    cache: BoundedCache[str, str] = upper.cache  # type: ignore[attr-defined]  # memoize's fn.cache
    assert cache.bytes <= 100_000 and len(cache) < 10
    assert upper(texts[-1]) == texts[-1].upper() and len(calls) == 50  # the recent one is cached
    assert upper("short") == "SHORT" and upper("short") == "SHORT" and len(calls) == 51


def test_token_counts_of_long_texts_are_cached_by_digest_not_by_text():
    counter = TokenCounter("o200k_base")
    before = tokens.LONG_COUNTS.bytes
    texts = [f"tool output {i} " + uuid.uuid4().hex * 3_000 for i in range(20)]  # ~96 kB each
    counts = [counter.text(t) for t in texts]
    assert counts == [len(get_encoding("o200k_base").encode_ordinary(t)) for t in texts]
    grown = tokens.LONG_COUNTS.bytes - before
    assert 0 < grown < 20 * 400  # a few hundred bytes per text, not 96 kB
    assert counter.text(texts[0]) == counts[0]
    assert TokenCounter("cl100k_base").text(texts[0]) == len(get_encoding("cl100k_base").encode_ordinary(texts[0]))
    assert counter.text("\ud800 lone surrogate " * 30) > 0


def test_normalize_memo_is_bounded_in_bytes():
    for _ in range(120):
        normalize("Some Tool Output, " + uuid.uuid4().hex * 10_000)  # 320 kB each, ~38 MB in all
    cache: BoundedCache[str, str] = normalize.cache  # type: ignore[attr-defined]  # memoize's fn.cache
    assert cache.bytes <= cache.max_bytes
    assert normalize("Hello, World!") == "hello world"


def test_oscillation_memory_is_per_snippet_digests_and_capped_in_sessions():
    osc = Oscillation(max_sessions=3)
    snippet = "x" * 100_000
    assert osc.observe("a", [snippet, "b"]) == 1.0
    assert osc.observe("a", [snippet, "c"]) == 0.5
    for s in ("b", "c", "d"):
        osc.observe(s, [snippet])
    assert list(osc._last) == ["b", "c", "d"]
    assert all(len(d) == 8 for digests in osc._last.values() for d in digests)


def test_the_shadow_backlog_is_bounded_it_drops_and_counts(start_proxy):
    proxy = start_proxy(rules=[Slow(0.3)], mode="shadow")
    proxy.app.state.finisher.max_shadow_backlog = 2
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}]}

    def send(i: int) -> int:
        return httpx.post(proxy.url + "/v1/chat/completions", json=body, timeout=30).status_code

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        assert list(pool.map(send, range(8))) == [200] * 8
    rows = proxy.rows()
    skipped = [r for r in rows if r["error"] == "shadow skipped: backlog full"]
    assert len(rows) == 8 and len(skipped) >= 4
    assert proxy.app.state.finisher.skipped_shadow == len(skipped)
    assert httpx.get(proxy.url + "/healthz").json()["shadow_skipped"] == len(skipped)
    assert f"context_engine_shadow_skipped {float(len(skipped))}" in httpx.get(proxy.url + "/metrics").text


def _deep_size(value, seen=None) -> int:
    """Bytes a parsed JSON value holds (containers and their items)."""
    import sys

    seen = set() if seen is None else seen
    if id(value) in seen:
        return 0
    seen.add(id(value))
    size = sys.getsizeof(value)
    if isinstance(value, dict):
        size += sum(_deep_size(k, seen) + _deep_size(v, seen) for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        size += sum(_deep_size(v, seen) for v in value)
    return size


def test_segment_cache_keeps_a_digest_per_message_and_a_byte_cap():
    from context_engine.proxy.engine.prefix import SegmentCache

    cache = SegmentCache(max_items=10_000, max_bytes=200_000)
    counter = TokenCounter("o200k_base")
    for i in range(200):
        m = {"role": "tool", "tool_call_id": f"c{i}", "content": f"{i} " + "x" * 50_000}
        assert cache.get(m, counter) == cache.get(dict(m), counter)
    assert cache.held_bytes <= 200_000 and len(cache) >= 100  # entries of ~100 bytes, not 50 kB


def test_parsed_results_are_charged_what_they_hold():
    import json

    from context_engine.rules.tool_json.compact import CompactOptions
    from context_engine.rules.tool_json.repeats import Repeats

    memo: BoundedCache[bytes, object] = BoundedCache(4096, 64 * 1024 * 1024)
    text = json.dumps({"id": "R1", **{f"f{i}": i for i in range(5_000)}})
    value = Repeats(memo, CompactOptions()).pruned(text)
    assert value is not None and memo.bytes >= _deep_size(value)


def test_rows_waiting_for_the_finishing_thread_are_bounded_the_rest_go_unmeasured(start_proxy):
    """A finishing thread slower than the requests (context metrics of large bodies) must not
    queue their parsed bodies without end: past the backlog cap a row is recorded at once,
    without its context metrics and bill estimate, and counted."""
    proxy = start_proxy(rules=[])
    finisher = proxy.app.state.finisher
    finisher.max_measure_backlog = 2
    held, free = threading.Event(), threading.Event()

    def hold() -> None:  # the finishing thread is busy until the test frees it
        held.set()
        free.wait(30)

    finisher._worker.submit(hold)
    assert held.wait(10)
    body = {"model": "gpt-4o", "messages": [{"role": "tool", "tool_call_id": "c", "content": "x " * 5_000},
                                            {"role": "user", "content": "hello"}]}
    try:
        for _ in range(6):
            assert httpx.post(proxy.url + "/v1/chat/completions", json=body, timeout=30).status_code == 200
        deadline = time.monotonic() + 10
        while (finisher.skipped_measure < 4 or len(finisher.pending) > 2) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(finisher.pending) == 2 and finisher.skipped_measure == 4  # 2 wait, 4 went unmeasured
    finally:
        free.set()
    rows = proxy.rows()
    unmeasured = [r for r in rows if json.loads(r["context"]).get("unmeasured") == "finish backlog full"]
    assert len(rows) == 6 and len(unmeasured) == 4
    assert all(r["utilization"] is None for r in unmeasured)
    assert httpx.get(proxy.url + "/healthz").json()["finish_skipped"] == 4


def test_the_memory_store_is_bounded_in_bytes_and_keeps_the_recent_values():
    from context_engine.proxy.store.stores import open_store

    store = open_store("memory://")
    store.max_bytes = 2_000_000  # type: ignore[attr-defined]  # MemoryStore's cap, smaller for the test
    values = {f"orig:{i}": uuid.uuid4().bytes * 6_250 for i in range(100)}  # 100 kB each, 10 MB in all
    for key, value in values.items():
        store.set(key, value)
        assert store.get(key) == value
    assert store.held_bytes <= 2_000_000  # type: ignore[attr-defined]
    assert store.get("orig:99") == values["orig:99"] and store.get("orig:0") is None
    assert store.claim("k", 60) and not store.claim("k", 60)  # type: ignore[attr-defined]
