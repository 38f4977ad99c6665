"""retrieve on messy long chats (issue 26, bad input): session headers repeated, out of
order or missing, turns in other scripts, emoji, empty-ish turns. Generated LoCoMo-shaped
conversations (two named speakers) go through the real rule with its default ranking of a
cold store (the static table when wordllama is installed, else BM25 alone), real
tiktoken. Whatever the mess:

- the invariants hold, and the same request on a fresh store gives the same bytes;
- a fact the question names by its id is still in the request (in the window, or in the
  memory zone), wherever in the history it was said;
- nothing in the zone is invented: each snippet is a turn of the dropped history.
"""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from context_engine.proxy.engine.invariants import rewrite_problems
from context_engine.proxy.engine.messages import MEMORY_HEADER, text_of
from context_engine.rules.retrieve.config import RetrieveConfig
from context_engine.rules.retrieve.rule import Retrieve
from tests.harness import make_ctx, make_deps

# the defaults, on a chat short enough for a test: turns leave after 4 units
OPTIONS = RetrieveConfig(window=4, block=2, min_closed_tokens=0, min_drop_ratio=0.0, embedder="hashing",
                         max_embed=2, cold_embedder="auto")
HEADERS = ["[Session 1, 1:56 pm on 8 May, 2023]", "[Session 2, 1:14 pm on 25 May, 2023]",
           "[Session 2, 1:14 pm on 25 May, 2023]",  # the same header twice
           "[Session 9, 10:00 am on 1 January, 2019]",  # out of order
           "[Session ?, on]", ""]  # malformed, missing
LINES = ["Hey Mel! Good to see you! How have you been?", "I'm swamped with the kids & work 😅🙈",
         "🎉🎉🎉", "¡Qué bonito! Fuimos a la playa el sábado.", "我们上周末去爬山了，风景很好。",
         "ذهبنا إلى السوق أمس", "Ich habe ein neues Fahrrad gekauft 🚲", "ok", "…", "👍",
         "I went to a support group yesterday and it was so powerful.",
         "We painted a sunrise together last weekend 🌅"]
SPEAKERS = ("Caroline", "Melanie")


@st.composite
def messy_chat(draw: Any) -> tuple[list[dict[str, Any]], str]:
    """A two-speaker chat of 16-40 turns with a fact naming an id somewhere in its first
    three quarters, and a last user turn asking for that id."""
    n = draw(st.integers(16, 40))
    fact_at = draw(st.integers(0, n * 3 // 4))
    fact_id = draw(st.sampled_from(["PX-4471", "VIP8812", "ZFA04Y"]))
    fact = f"My locker code at the gym is {fact_id}, don't tell anyone 🤫"
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "A long-term conversation between Caroline and Melanie."}]
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        line = fact if i == fact_at else draw(st.sampled_from(LINES))
        text = f"{SPEAKERS[i % 2]}: {line}"
        if draw(st.integers(0, 5)) == 0:
            header = draw(st.sampled_from(HEADERS))
            text = f"{header}\n{text}" if header else text
        msgs.append({"role": role, "content": text})
    if msgs[-1]["role"] == "user":
        msgs.append({"role": "assistant", "content": "Melanie: 😂"})
    msgs.append({"role": "user", "content": f"What was the code {fact_id} for?"})
    return msgs, fact


def _apply(msgs: list[dict[str, Any]]) -> list[Any]:
    rule = Retrieve(OPTIONS, make_deps())
    return asyncio.run(rule.apply(make_ctx(copy.deepcopy(msgs), session_id="messy"))).messages


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drawn=messy_chat())
def test_a_messy_chat_keeps_its_facts_and_the_invariants(drawn: tuple[list[dict[str, Any]], str]) -> None:
    msgs, fact = drawn
    out = _apply(msgs)
    assert rewrite_problems(msgs, out) == []
    assert json.dumps(_apply(msgs), ensure_ascii=False) == json.dumps(out, ensure_ascii=False)
    sent = "\n".join(text_of(m) for m in out)
    assert fact in sent
    turns = "\n".join(text_of(m) for m in msgs)
    for zone in (text_of(m) for m in out if text_of(m).startswith(MEMORY_HEADER)):
        for line in zone.splitlines()[1:]:
            if line.startswith("#"):  # "#7 Caroline: …": the turn as it was said
                assert line.split(" ", 1)[1] in turns, line
