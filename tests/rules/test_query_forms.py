"""retrieve's ranking aids: name-blind query forms, pairs of names, date scope, entity-linked expansion,
neighbour decay and the length prior. Each is checked on its own function and through a real index
(hashing embedder, real BM25 and faiss)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from context_engine.proxy.engine.tokens import TokenCounter
from context_engine.proxy.store.stores import MemoryStore
from context_engine.rules.retrieve.config import RetrieveConfig
from context_engine.rules.retrieve.embedders import HashingEmbedder
from context_engine.rules.retrieve.index import EmbeddingCache, SessionIndex, chunk_messages
from context_engine.rules.retrieve.query import (
    linked_entities,
    months,
    sub_queries,
    terms,
    without_names,
)
from context_engine.rules.retrieve.search import (
    Hit,
    SearchParams,
    _candidates,
    cite,
    fused_scores,
    render,
    select,
)

PARAMS = SearchParams(top_k=8, threshold=0.0, neighbours=2, max_overlap=0.55, max_tokens=2000,
                      bm25_weight=0.5, bm25_weight_exact=0.75, expansion=0.0, name_blind=False,
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

def test_without_names_drops_the_speakers_names_and_their_possessives():
    speakers = {"melanie", "caroline"}
    assert without_names("What does Melanie do to de-stress?", speakers) == "What does do to de-stress?"
    assert without_names("What book did Melanie read from Caroline's suggestion?", speakers) \
        == "What book did read from suggestion?"
    assert without_names("What did the team decide?", speakers) == "What did the team decide?"
    assert without_names("Did Melanie’s dog bark?", {"melanie smith"}) == "Did dog bark?"
    assert without_names("Did Melanielle call?", speakers) == "Did Melanielle call?"  # whole names only


def test_two_names_joined_make_one_form_per_name_not_a_part_holding_a_name():
    assert sub_queries("Did John and James study together?") == [
        "Did John and James study together?", "Did John study together?", "Did James study together?"]
    assert sub_queries("What are John and James' favorite games?")[1:] == [
        "What are John favorite games?", "What are James favorite games?"]
    # split into parts, a part whose words are all speakers' names asks nothing of its own
    assert sub_queries("what did we plan, james?", frozenset(terms("James"))) == ["what did we plan, james?"]
    assert sub_queries("what did we plan, and the budget?", frozenset(terms("James")))[1:] == [
        "what did we plan", "the budget"]


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

def test_name_blind_searches_the_query_without_the_speakers_names():
    emb = RecordingEmbedder()
    idx = index_of(FILLER, emb)
    emb.texts.clear()
    scores(idx, "What does Melanie do to relax?", name_blind=True)
    assert emb.texts == ["What does do to relax?"]
    emb.texts.clear()
    scores(idx, "Did Caroline and Melanie meet?", name_blind=True)  # the pair's forms fold into one
    assert emb.texts == ["Did meet?"]
    emb.texts.clear()
    scores(idx, "Caroline?", name_blind=True)  # nothing but a name: searched as it is
    assert emb.texts == ["Caroline?"]
    emb.texts.clear()
    scores(idx, "What is the plan?", name_blind=True)
    assert emb.texts == ["What is the plan?"]


def test_name_blind_ranks_the_topic_above_the_turns_that_only_say_a_name():
    turns = FILLER[:10] + ["Melanie: Bye Caroline, take care!", "Caroline: See you, Melanie!"] \
        + FILLER[10:20] + ["Melanie: I go to pottery class every week to relax."] + FILLER[20:]
    idx = index_of(turns)
    q = "What does Melanie do to relax, Caroline?"
    pottery = turns.index("Melanie: I go to pottery class every week to relax.")
    blind = scores(idx, q, name_blind=True)
    assert int(np.argmax(blind)) == pottery
    assert blind[pottery] > max(blind[10], blind[11])


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


def test_a_chunk_without_a_vector_ranks_by_bm25_alone_on_the_fused_scale():
    """A cold store: most chunks have no vector yet. A chunk that matches every word of
    the question scores 1.0 (BM25's own scale), not BM25's share of the fusion (0.5
    here), so it can reach ``threshold`` and seed the zone."""
    turns = FILLER[:10] + ["Caroline: The quokka sanctuary on Rottnest opens at nine."] + FILLER[10:20]
    msgs = [{"role": "system", "content": "Chat between Caroline and Melanie."}]
    msgs += [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(turns)]
    idx = SessionIndex("s", EmbeddingCache(HashingEmbedder(), MemoryStore()))
    idx.sync(chunk_messages(msgs, 1, len(msgs), 1200))
    idx.vectorize(order=[0, 1], cap=2, lookup=False)  # two vectors, as a cold request's max_embed
    quokka = next(i for i, c in enumerate(idx.chunks) if "quokka" in c.text)
    assert not idx.has_vector()[quokka] and idx.has_vector().sum() == 2
    got = scores(idx, "quokka sanctuary Rottnest")
    assert got[quokka] == 1.0
    assert got[quokka] > max(got[i] for i in range(len(got)) if i != quokka)


# --- the length prior -------------------------------------------------------------------------

REACTION = "Melanie: Wow, that's great!"
TELLING = ("Caroline: I signed up for a pottery class last week; working the clay on Tuesday evenings "
           "calms me down after a long shift, and I made a blue bowl for my mum.")


def _fill_order(turns: list[str], prior: float, max_tokens: int = 2000) -> list[str]:
    idx = index_of(turns)
    given = np.zeros(len(idx.chunks))
    for i, c in enumerate(idx.chunks):
        given[i] = 1.0 if c.text == turns[0] else 0.9 if c.text == turns[1] else 0.0
    p = dataclasses.replace(PARAMS, threshold=0.5, neighbours=0, max_tokens=max_tokens, length_prior=prior)
    return [h.chunk.text for h in select(idx, given, "", p, TokenCounter("o200k_base"))]


def test_between_named_people_a_short_reaction_fills_after_a_turn_that_tells_something():
    turns = [REACTION, TELLING] + FILLER
    assert _fill_order(turns, 0.0) == [REACTION, TELLING]  # off: by score alone
    assert _fill_order(turns, 0.4) == [TELLING, REACTION]  # (16 / 100) ** 0.4 * 1.0 < 0.9 * weight
    # a zone with room for one of them shows the turn that tells
    idx = index_of(turns)
    telling = next(c for c in idx.chunks if c.text == TELLING)
    room = TokenCounter("o200k_base").text(render([Hit(telling, 0.9)])) + 4  # the reaction costs more
    assert _fill_order(turns, 0.4, room) == [TELLING]
    assert _fill_order(turns, 0.0, room) == [REACTION]


def test_between_a_user_and_an_assistant_the_length_prior_changes_nothing():
    """An assistant's long turns are its verbosity: unnamed turns keep the order of their scores."""
    turns = [REACTION.split(": ", 1)[1], TELLING.split(": ", 1)[1]] + [f.split(": ", 1)[1] for f in FILLER]
    assert _fill_order(turns, 0.4) == _fill_order(turns, 0.0) == turns[:2]


def test_a_negative_length_prior_stops_the_config_naming_it():
    with pytest.raises(ValueError, match="^length_prior must be at least 0$"):
        RetrieveConfig(length_prior=-0.1)
