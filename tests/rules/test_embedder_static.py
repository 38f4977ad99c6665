"""``wordllama``: the static token table WordLlama's wheel ships, on the real pinned files."""

import os
import shutil

import numpy as np
import pytest

from context_engine.rules.retrieve.embedder_static import WEIGHTS, StaticEmbedder, wordllama_dir
from context_engine.rules.retrieve.embedders import make_embedder

pytestmark = pytest.mark.skipif(wordllama_dir() is None,
                                reason="needs wordllama (pip install --no-deps wordllama)")

TEXTS = ["Caroline: I went to the support group yesterday and it was powerful.",
         "Melanie: I adopted a puppy last week!", "Jon: She got a new dog from the shelter.",
         "Gina: The stock market fell again today.", "我的会员号是 VIP8812。", "ok", ""]


@pytest.fixture(scope="module")
def emb():
    return make_embedder("wordllama")


def test_rows_are_unit_length_except_an_empty_text(emb):
    rows = emb.embed(TEXTS)
    assert rows.shape == (len(TEXTS), 256) and rows.dtype == np.float32
    assert np.allclose(np.linalg.norm(rows[:-1], axis=1), 1.0, atol=1e-5)
    assert not rows[-1].any()


def test_a_vector_does_not_depend_on_its_batch(emb):
    together = emb.embed(TEXTS)
    for i, text in enumerate(TEXTS):
        assert emb.embed([text])[0].tobytes() == together[i].tobytes()


def test_related_sentences_are_closer_than_unrelated_ones(emb):
    puppy, dog, market = emb.embed(TEXTS[1:4])
    assert float(puppy @ dog) > float(puppy @ market) + 0.2


def test_a_whole_conversation_embeds_without_a_model_run(emb):
    turns = [f"Speaker {i % 2}: turn {i} about painting, hiking and the new job" for i in range(419)]
    assert emb.embed(turns).shape == (419, 256)
    assert emb.name == "wordllama"  # its vectors live apart from MiniLM's in the store


def test_weights_that_are_not_the_pinned_ones_are_refused(tmp_path):
    folder, installed = tmp_path / "wordllama", wordllama_dir()
    assert installed is not None
    shutil.copytree(installed, folder)
    with open(os.path.join(folder, WEIGHTS[0]), "r+b") as fh:
        fh.seek(-4, os.SEEK_END)
        fh.write(b"\x00\x01\x02\x03")
    with pytest.raises(ValueError, match="sha256"):
        StaticEmbedder(str(folder))



def test_a_cold_request_embeds_its_whole_history_with_max_embed_0(emb):
    # the opt-in use: every chunk embedded on the request, so cold ranks as warm does
    from tests.harness import make_deps
    from tests.rules.test_cold_memory import cold_history
    from tests.rules.test_prefetch import stored_rule as rule
    from tests.rules.test_retrieve import apply, memory_of

    out = apply(rule(make_deps(embedder=emb), max_embed=0), cold_history())
    assert out.notes["retrieve"]["unembedded"] == 0 and out.notes["retrieve"]["embedder"] == "wordllama"
    zone = memory_of(out.messages)[0]
    assert "X99812" in zone and "lemon-tree-42" in zone


def test_a_cold_request_ranks_with_the_static_table_and_a_warm_one_does_not():
    # the default cold_embedder (auto): the static table is a cold request's dense half,
    # the configured embedder (MiniLM in production) takes over once the store has vectors
    from context_engine.proxy.store.stores import MemoryStore
    from tests.harness import make_deps
    from tests.rules.test_cold_memory import cold_history
    from tests.rules.test_prefetch import RecordingEmbedder
    from tests.rules.test_prefetch import stored_rule as rule
    from tests.rules.test_retrieve import apply, memory_of

    main, store = RecordingEmbedder(), MemoryStore()
    r = rule(make_deps(store=store, embedder=main))
    assert r.cold is not None and r.cold.name == "wordllama"
    before = r.cold.calls  # (one table per process: other rules' calls count too)
    out = apply(r, cold_history())
    assert r.cold.calls > before and main.texts == []  # cold: the table embedded the history
    assert "X99812" in memory_of(out.messages)[0]
    assert r.prefetch() > 100  # the background embeds it with the main embedder
    calls = r.cold.calls
    main.texts.clear()
    apply(r, cold_history(), "s2")  # the same history, another session: the store is warm
    assert r.cold.calls == calls and main.texts  # the main embedder's vectors rank


def test_every_rule_shares_one_table():
    from context_engine.rules.retrieve.embedder_static import cold_embedder

    assert cold_embedder("auto") is cold_embedder("wordllama")


def test_cold_embedder_none_leaves_a_cold_request_to_bm25_and_a_bad_value_is_refused():
    from context_engine.rules.retrieve.config import RetrieveConfig
    from tests.harness import make_deps
    from tests.rules.test_retrieve import rule

    assert rule(make_deps(), cold_embedder="none").cold is None
    with pytest.raises(ValueError, match="cold_embedder"):
        RetrieveConfig(cold_embedder="minilm")


def test_corpus_weights_make_common_tokens_weigh_least_and_are_a_function_of_the_texts(emb):
    # every turn opens "Caroline:": under the session's idf the name and the colon weigh
    # least, so a turn's vector is nearer what it says than the plain mean puts it
    corpus = [f"Caroline: {w}" for w in ("puppy", "stock market", "painting class", "hiking trip", "new job")]
    weighted = emb.for_corpus(corpus)
    assert weighted.name != emb.name  # never stored beside the plain table's vectors
    puppy = emb.embed(["puppy"])[0]
    plain, heavy = emb.embed([corpus[0]])[0], weighted.embed([corpus[0]])[0]
    assert float(heavy @ puppy) > float(plain @ puppy) + 0.05
    assert np.allclose(np.linalg.norm(weighted.embed(corpus), axis=1), 1.0, atol=1e-5)
    again = emb.for_corpus(list(corpus))
    assert weighted.embed(corpus).tobytes() == again.embed(corpus).tobytes()
    question = weighted.embed(["Did Caroline adopt a puppy?"])  # a text outside the corpus
    assert question.shape == (1, 256) and float(question[0] @ heavy) > float(question[0] @ weighted.embed([corpus[1]])[0])


def test_an_index_with_other_vectors_shares_its_terms_and_leaves_the_original_rows(emb):
    from context_engine.proxy.store.stores import MemoryStore
    from context_engine.rules.retrieve.embedding_cache import EmbeddingCache
    from context_engine.rules.retrieve.index import SessionIndex, chunk_messages

    msgs = [{"role": "system", "content": "Chat."}] + [{"role": "user", "content": t} for t in TEXTS[:4]]
    idx = SessionIndex("s", EmbeddingCache(emb, MemoryStore()))
    idx.sync(chunk_messages(msgs, 1, len(msgs), 1200))
    vectors = emb.embed([c.embed_text for c in idx.chunks])
    copy = idx.with_vectors(vectors)
    assert not idx.has_vector().any() and copy.has_vector().all()
    assert copy.chunks is idx.chunks and copy._bm25 is idx._bm25 is not None  # BM25 built once
    assert np.array_equal(copy.bm25_scores(["puppy"]), idx.bm25_scores(["puppy"]))
    assert int(np.argmax(copy.dense_scores(emb.embed(["a dog from the shelter"])[0]))) == 2
