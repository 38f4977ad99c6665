"""retrieve's ranking aids: first-person query form, date scope, entity-linked expansion
and neighbour decay. Each is checked on its own function and through a real index
(hashing embedder, real BM25 and faiss)."""

from __future__ import annotations

import dataclasses

import numpy as np

from context_engine.proxy.store.stores import MemoryStore
from context_engine.rules.retrieve.embedders import HashingEmbedder
from context_engine.rules.retrieve.index import EmbeddingCache, SessionIndex, chunk_messages
from context_engine.rules.retrieve.query import first_person, linked_entities, months, terms
from context_engine.rules.retrieve.search import SearchParams, _candidates, cite, fused_scores

PARAMS = SearchParams(top_k=8, threshold=0.0, neighbours=2, max_overlap=0.55, max_tokens=2000,
                      bm25_weight=0.5, bm25_weight_exact=0.75, expansion=0.0, first_person=False,
                      date_boost=0.0)


class RecordingEmbedder(HashingEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        self.texts += texts
        return super().embed(texts)


def scores(idx: SessionIndex, query: str, **changes) -> np.ndarray:
    return fused_scores(idx, query, idx.cache.get, dataclasses.replace(PARAMS, **changes))


def index_of(turns: list[str], embedder: HashingEmbedder | None = None) -> SessionIndex:
    msgs = [{"role": "system", "content": "Chat between Caroline and Melanie."}]
    msgs += [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(turns)]
    idx = SessionIndex("s", EmbeddingCache(embedder or HashingEmbedder(), MemoryStore()))
    idx.sync(chunk_messages(msgs, 1, len(msgs), 1200))
    idx.vectorize()
    return idx


FILLER = [f"{'Caroline' if i % 2 == 0 else 'Melanie'}: The weather was grey and the bus was late ({i})."
          for i in range(30)]


# --- query forms --------------------------------------------------------------------------

def test_first_person_names_become_i_and_my():
    speakers = {"melanie", "caroline"}
    assert first_person("What does Melanie do to de-stress?", speakers) == "What does I do to de-stress?"
    assert first_person("What book did Melanie read from Caroline's suggestion?", speakers) \
        == "What book did I read from my suggestion?"
    assert first_person("What did the team decide?", speakers) is None
    assert first_person("Did Melanie's dog bark?", {"melanie smith"}) == "Did my dog bark?"


def test_months_read_month_and_year_in_several_forms():
    assert months("Where was John between August 11 and August 15 2023?") == {("august", "2023")}
    assert months("during April 2022, and on Sept. 3rd, 2021") == {("april", "2022"), ("september", "2021")}
    assert months("[Session 3, 1:14 pm on 25 May, 2023]") == {("may", "2023")}
    assert months("what did I say in May?") == frozenset()


def test_linked_entities_are_new_names_and_titles():
    text = 'Caroline: I loved "Becoming Nicole" by Amy Ellis Nutt. Sweden was lovely, Melanie!'
    found = linked_entities([text], {"caroline", "melanie"}, set(terms("What book did Caroline like?")))
    assert found == ["Amy Ellis Nutt", "Becoming Nicole"]  # Sweden starts a sentence; speakers skipped
    assert linked_entities([text], {"caroline", "melanie"}, set(terms("Was Becoming Nicole by Amy Ellis Nutt good?"))) == []


# --- through the index --------------------------------------------------------------------

def test_first_person_form_is_searched_when_the_query_names_a_speaker():
    emb = RecordingEmbedder()
    idx = index_of(FILLER, emb)
    q = "What does Melanie do to relax?"
    scores(idx, q, first_person=True)
    assert "What does I do to relax?" in emb.texts
    emb.texts.clear()
    scores(idx, "What is the plan?", first_person=True)
    assert emb.texts == ["What is the plan?"]


def test_date_boost_prefers_the_session_the_query_dates():
    turns = ["[Session 1, 2:00 pm on 3 June, 2021]\nMelanie: I played chess in the park all afternoon."]
    turns += FILLER[:6]
    turns += ["[Session 2, 9:00 am on 20 April, 2022]\nMelanie: I played chess in the park all afternoon."]
    idx = index_of(turns)
    q = "What did Melanie play in April 2022?"
    april = len(turns) - 1
    assert np.allclose(scores(idx, q, date_boost=0.2) - scores(idx, q),
                       [0.2 if i == april else 0.0 for i in range(len(turns))])
    undated = "What did Melanie play?"
    assert scores(idx, undated, date_boost=0.2).tolist() == scores(idx, undated).tolist()


def test_expansion_follows_a_title_to_the_turn_that_names_it():
    turns = ['Caroline: You should read "Becoming Nicole", my favourite book about family.'] + FILLER
    turns += ["Melanie: Finished Becoming Nicole last night, it made me cry."]
    idx = index_of(turns)
    q = "What book did Caroline recommend?"
    plain, linked = scores(idx, q), scores(idx, q, expansion=0.7)
    last = len(turns) - 1

    def rank(s: np.ndarray) -> int:
        return sorted(range(len(s)), key=lambda i: (-s[i], i)).index(last)

    assert rank(linked) < rank(plain)
    assert rank(linked) <= 2
    assert linked[last] <= 0.7 * linked[0] + 1e-9  # scaled by the score of the hit it came from


def test_neighbours_compete_with_decayed_seed_scores():
    idx = index_of(FILLER[:10])
    scores = np.zeros(len(idx.chunks))
    scores[5] = 1.0
    p = dataclasses.replace(PARAMS, top_k=1, neighbours=2, neighbour_decay=0.5)
    got = dict(_candidates(idx, scores, p))
    assert got == {5: 1.0, 4: 0.5, 6: 0.5, 3: 0.25, 7: 0.25}
    assert [i for i, _ in _candidates(idx, scores, p)] == [5, 4, 6, 3, 7]


def test_cite_drops_the_role_when_the_text_names_its_speaker():
    idx = index_of(["Caroline: Hello there.", "plain words"])
    assert cite(idx.chunks[0]) == "#1 Caroline: Hello there."
    assert cite(idx.chunks[1]) == "#2 assistant: plain words"
