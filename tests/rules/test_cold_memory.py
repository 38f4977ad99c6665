"""retrieve on a cold session (a long history it has never embedded): a request embeds
nothing while the store has no vector of the session's chunks (BM25 ranks them), at most
``max_embed`` texts once it has some (the best BM25 candidates first), the background lane
embeds the rest, and the rewrite stays a pure function of the request and the store's contents.
Nothing is embedded for a session before retrieve drops something there."""

from __future__ import annotations

import copy
import json

from context_engine.proxy.store.stores import MemoryStore
from context_engine.rules.retrieve.embedders import HashingEmbedder
from tests.harness import make_deps
from tests.rules.test_prefetch import RecordingEmbedder as Counting
from tests.rules.test_prefetch import stored_rule as rule
from tests.rules.test_retrieve import apply, chat, memory_of

FACTS = {3: "My passport number is X99812.", 17: "The wifi password is lemon-tree-42.",
         40: "Our anniversary dinner is at Luigi's on the 14th."}




def cold_history() -> list[dict]:
    return chat(FACTS, 160, "What is my passport number and the wifi password?")  # 320 old turns


def out_json(r, msgs, session="s1") -> str:
    return json.dumps(apply(r, msgs, session).messages, ensure_ascii=False)


def test_a_cold_request_embeds_nothing_and_bm25_finds_the_facts():
    emb = Counting()
    r = rule(make_deps(embedder=emb), max_embed=8)
    msgs = cold_history()
    out = apply(r, msgs)
    assert emb.texts == []  # no chunk: and no question either, with no chunk vector to score
    assert memory_of(out.messages) and "X99812" in memory_of(out.messages)[0]  # BM25 finds it
    assert out.notes["retrieve"]["unembedded"] > 100


def test_a_partly_warm_request_embeds_at_most_max_embed_chunks():
    emb, store = Counting(), MemoryStore()
    r = rule(make_deps(store=store, embedder=emb), max_embed=8)
    apply(r, chat(FACTS, 60, "What is my passport number?"), "earlier")
    assert r.prefetch() > 50  # the store now holds the vectors of those 60 turns
    emb.texts.clear()
    msgs = cold_history()
    apply(r, msgs)
    question_forms = {t for t in emb.texts if t.strip(" ?.") in msgs[-1]["content"]}
    others = set(emb.texts) - question_forms
    assert question_forms and 0 < len(others) <= 8


def test_cold_rewrite_is_a_function_of_request_and_store():
    store = MemoryStore()
    a = rule(make_deps(store=store, embedder=HashingEmbedder()), max_embed=8)
    msgs = cold_history()
    snapshot = copy.deepcopy(store._data)
    first = out_json(a, msgs)
    # a fresh process with a store holding the same contents gives the same bytes
    twin_store = MemoryStore()
    twin_store._data = snapshot
    twin = rule(make_deps(store=twin_store, embedder=HashingEmbedder()), max_embed=8)
    assert out_json(twin, msgs) == first
    # so does the same rule and session when the store has not changed in between
    again_store = MemoryStore()
    again_store._data = copy.deepcopy(store._data)
    b = rule(make_deps(store=again_store, embedder=HashingEmbedder()), max_embed=8)
    assert out_json(b, msgs) == out_json(b, msgs)


def test_once_the_background_embedded_the_turns_they_are_searched_in_full():
    store = MemoryStore()
    capped = rule(make_deps(store=store, embedder=HashingEmbedder()), max_embed=4)
    msgs = cold_history()
    first = out_json(capped, msgs)
    assert capped.prefetch() > 100  # the background lane embeds what the request left
    # the session keeps the zone it committed: what the background did since never
    # changes bytes already sent (replicas and the cached prefix agree)
    assert out_json(capped, msgs) == first
    assert capped.sessions["s1"].missing() == []
    # a new decision (here another session over the same turns) is the full search
    warm = out_json(capped, msgs, "s2")
    full = rule(make_deps(store=MemoryStore(), embedder=HashingEmbedder()), max_embed=0)
    assert warm == out_json(full, msgs, "s2")


def test_replicas_send_the_zone_committed_first_whatever_their_background_did():
    store = MemoryStore()
    a = rule(make_deps(store=store, embedder=HashingEmbedder()), max_embed=2)
    b = rule(make_deps(store=store, embedder=HashingEmbedder()), max_embed=2)
    msgs = cold_history()
    sent = out_json(a, msgs)
    a.prefetch()  # replica a's background embeds everything; b's did nothing
    assert out_json(b, msgs) == sent == out_json(a, msgs)


def test_no_embedding_before_anything_is_dropped():
    emb = Counting()
    r = rule(make_deps(embedder=emb), min_closed_tokens=10**6)
    msgs = cold_history()
    out = apply(r, msgs)
    assert out.messages == msgs and r.prefetch() == 0
    assert emb.texts == [] and "s1" not in r.sessions


def test_background_tables_are_bounded():
    r = rule(make_deps(embedder=HashingEmbedder()), max_embed=1, max_sessions=3)
    msgs = chat(FACTS, 30, "What is my passport number?")
    for n in range(20):
        apply(r, msgs, f"s{n}")
    assert len(r.sessions) == 3 and len(r.ahead.fills) == r.ahead.max_sessions < 20
    r.prefetch()
    assert len(r.ahead.done) <= r.ahead.max_sessions and not r.ahead.fills and not r.ahead.pending
