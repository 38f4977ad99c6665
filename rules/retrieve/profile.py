"""What the user said about themselves, for questions that ask for advice.

"What should I serve with my homegrown ingredients?", "Any tips for my commute?": the
answer a user wants builds on what they told earlier ("I've been listening to a lot of
true crime on my commute"), and those turns seldom share the question's best words.
A long reply that does share them (an assistant's list of ten recipes) outscores them
and, with its neighbours, fills the zone. So when a question asks for advice
(``query.asks_advice``), a share of the zone (``self_share``) is kept for the user's own
statements: user turns with a first-person sentence that is not a question, best fused
score first. They cost little (a user turn is short) and the rest of the zone is filled
as before.
"""

from __future__ import annotations

import re

import numpy as np

from context_engine.proxy.engine.messages import SPEAKER
from context_engine.rules.retrieve.index import Chunk, SessionIndex

_FIRST = re.compile(r"(?<![\w'’])I(?![\w])|\b(?:my|mine|myself|me)\b", re.IGNORECASE)
_SENTENCE = re.compile(r"[^.!?？。！\n]+[.!?？。！]*")


def _first_person(sentence: str) -> bool:
    """A first-person word: "I" (capital, as written), my, mine, myself, me."""
    return any(m.group(0) == "I" or m.group(0).lower() != "i" for m in _FIRST.finditer(sentence))


def states_self(text: str) -> bool:
    """Whether ``text`` holds a statement of the speaker about themselves: a sentence
    in the first person that is not a question ("I harvested cherry tomatoes from my
    garden.", not "Can you help me?")."""
    body = SPEAKER.sub("", text, count=1)
    return any(_first_person(s) and not s.rstrip().endswith(("?", "？"))
               for s in _SENTENCE.findall(body))


def is_own(chunk: Chunk) -> bool:
    """A user turn stating something about the user."""
    return chunk.role == "user" and states_self(chunk.text)


def own_turns(index: SessionIndex, scores: np.ndarray) -> list[tuple[int, float]]:
    """The user's own statements with any relevance (score above 0), best first, ties by
    position: the candidates the zone's ``self_share`` is kept for."""
    own = [i for i, c in enumerate(index.chunks) if scores[i] > 0 and is_own(c)]
    return sorted(((i, float(scores[i])) for i in own), key=lambda kv: (-kv[1], kv[0]))
