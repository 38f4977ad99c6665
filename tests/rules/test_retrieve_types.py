"""retrieve by question type (issue 26): advice questions bring back what the user said
about themselves; several statements on one subject show which is the latest. The real
rule, real tiktoken, the hashing embedder and a cold store (``max_embed`` as configured)."""

from __future__ import annotations

import asyncio
from typing import Any

from context_engine.proxy.engine.messages import MEMORY_HEADER, text_of
from context_engine.rules.retrieve.config import RetrieveConfig
from context_engine.rules.retrieve.profile import states_self
from context_engine.rules.retrieve.query import asks_advice, asks_for_memory, terms
from context_engine.rules.retrieve.rule import Retrieve
from tests.harness import make_ctx, make_deps

OPTIONS: dict[str, Any] = {"window": 2, "block": 2, "min_closed_tokens": 0, "embedder": "hashing",
                           "max_snippet_tokens": 400, "budget_share": 0.0}
LIST = ("Here are some activities you could try at work and on the way: 1. Stretch at your desk "
        "between meetings. 2. Plan the work day in a notebook. 3. Take a short walk at lunch. "
        "4. Try a new team activity on Fridays. 5. Join an after-work sports club. ({})")
OWN = "I've been listening to a lot of true crime podcasts lately, mostly on the bus."


def _zone(messages: list[Any], **options: Any) -> str:
    r = Retrieve(RetrieveConfig(**{**OPTIONS, **options}), make_deps())
    out = asyncio.run(r.apply(make_ctx(messages, session_id="s")))
    zones = [text_of(m) for m in out.messages if text_of(m).startswith(MEMORY_HEADER)]
    return zones[-1] if zones else ""


def _advice_chat(question: str) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful assistant."}]
    for i in range(12):
        user = OWN if i == 3 else f"What else could I do at work to stay active? ({i})"
        msgs += [{"role": "user", "content": user}, {"role": "assistant", "content": LIST.format(i)}]
    msgs += [{"role": "user", "content": "Thanks, that helps."},
             {"role": "assistant", "content": "Glad to help."},
             {"role": "user", "content": question}]
    return msgs


def test_advice_question_brings_back_the_users_own_statement():
    # the long replies share the question's words and fill a small zone; the user's own
    # statement shares no word with it (only its neighbours do), yet an advice question needs it
    zone = _zone(_advice_chat("Can you suggest some activities I can do during my commute to work?"))
    assert OWN in zone


def test_self_share_zero_is_the_plain_ranking():
    # the full hybrid search (every chunk embedded on the request, as on a warm store)
    zone = _zone(_advice_chat("Can you suggest some activities I can do during my commute to work?"),
                 self_share=0.0, max_embed=0)
    assert zone and OWN not in zone


def test_with_the_advice_gate_a_question_about_the_past_keeps_the_plain_ranking():
    question = "What activities at work and on the bus did the list name?"
    assert not asks_advice(question)
    assert _zone(_advice_chat(question), self_gate="advice") == _zone(_advice_chat(question), self_share=0.0)


def test_a_preference_question_not_worded_as_advice_still_gets_the_users_statements():
    # no "suggest", "tips" or "should I": the advice gate misses it, the default does not
    question = "Are there activities I can do during my commute to work?"
    assert not asks_advice(question)
    assert OWN in _zone(_advice_chat(question))
    assert OWN not in _zone(_advice_chat(question), self_gate="advice")


def test_advice_request_after_news_asks_for_memory():
    # what it tells is what the advice is about: the gate counts it as asked
    query = "I've been feeling a bit stuck with my paintings lately. Do you have any ideas on how I can find new inspiration?"
    memory = set(terms("painting challenge inspiration social media"))
    assert asks_advice(query)
    assert asks_for_memory(query, set(), memory)
    assert not asks_for_memory("I've been feeling a bit stuck with my paintings lately. Did you see the game?",
                               set(), memory)


def test_what_counts_as_a_statement_about_oneself():
    assert states_self("I harvested cherry tomatoes from my garden.")
    assert states_self("Caroline: My sister moved to Berlin.")
    assert not states_self("Can you help me find a hotel?")
    assert not states_self("The hotel has a rooftop pool.")
    assert not asks_advice("I got some great tips and ideas. Thanks!")
    assert not asks_advice("What did Caroline recommend?")


def _updates_chat(question: str) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful assistant."}]
    said = {2: "[Session 2023/05/02] I attend yoga twice a week, it helps me relax.",
            9: "[Session 2023/11/20] These days I go to yoga three times a week."}
    for i in range(12):
        user = said.get(i, f"Can you share a quick dinner idea with lentils? ({i})")
        msgs += [{"role": "user", "content": user},
                 {"role": "assistant", "content": f"Sure, a lentil soup with cumin and lemon ({i})."}]
    msgs.append({"role": "user", "content": question})
    return msgs


def test_the_latest_statement_on_a_subject_is_marked():
    zone = _zone(_updates_chat("How often do I go to yoga classes?"))
    lines = zone.splitlines()
    old = next(x for x in lines if "twice a week" in x)
    new = next(x for x in lines if "three times a week" in x)
    assert lines.index(old) < lines.index(new)  # in order, each under its session date
    assert lines[lines.index(new) - 1] == "[Session 2023/11/20]"
    assert new.endswith("(latest on yoga)")
    latest = new.split(" ")[0]  # "#19"
    assert old.endswith(f"(earlier than {latest} on yoga)")


def test_one_statement_on_the_subject_is_not_marked():
    msgs = _updates_chat("How often do I go to yoga classes?")
    msgs[5]["content"] = "[Session 2023/05/02] I attend pilates twice a week, it helps me relax."
    zone = _zone(msgs)
    assert "three times a week" in zone and "(latest" not in zone and "(earlier" not in zone


def test_marks_are_deterministic_and_can_be_turned_off():
    msgs = _updates_chat("How often do I go to yoga classes?")
    assert _zone(msgs) == _zone(msgs)
    plain = _zone(msgs, mark_updates=False)
    assert "twice a week" in plain and "(latest" not in plain


def test_between_named_people_an_advice_request_is_conversation():
    msgs = _advice_chat("Caroline: Can you suggest some activities I can do during my commute to work?")
    for m in msgs[1:-1]:
        m["content"] = f"{'Caroline' if m['role'] == 'user' else 'Melanie'}: {m['content']}"
    assert _zone(msgs) == _zone(msgs, self_share=0.0)


def test_a_subject_the_window_shows_once_still_asks_for_the_other_statements():
    # the latest statement is in the window: the question's words are all visible, yet
    # the memory holds an earlier statement on the subject, which the zone brings back
    msgs = _updates_chat("How often do I go to yoga?")
    msgs[-3]["content"] = "[Session 2023/11/20] These days I go to yoga three times a week."
    msgs[19]["content"] = "Can you share a quick dinner idea with lentils? (9)"
    zone = _zone(msgs)
    assert "I attend yoga twice a week" in zone
    assert _zone(msgs, mark_updates=False) == ""  # the plain gate: every word is visible


def test_a_pointer_to_an_earlier_chat_asks_only_with_an_assistant():
    memory = set(terms("pottery class lake camping"))
    turn = "Since our last chat about the pottery class, I kept practising every day."
    assert asks_for_memory(turn, set(), memory)  # a user telling the assistant: a recall cue
    assert not asks_for_memory(turn, set(), memory, pointers=False)  # friends: small talk
