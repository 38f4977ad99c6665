"""Reading a query before retrieval: when not to retrieve, how to weight BM25, how to split.

- ``is_acknowledgement``: turns that are only thanks/ok/emotion ("thanks", "ok", "好的")
  never trigger retrieval.
- ``bm25_weight``: ids, numbers, dates and code-like tokens are matched by exact terms
  far better than by embeddings, so such queries weight BM25 up.
- ``terms``: the tokenizer shared by BM25 and the overlap filter; Latin words are
  lower-cased and stemmed lightly, CJK text becomes character bigrams.
- ``sub_queries``: a question naming several things ("X and Y") is also searched per
  part, so multi-hop questions recall each part.
- ``without_names``: a question about a named speaker ("What does Melanie do to
  de-stress?") is searched without the speakers' names ("What does do to
  de-stress?"): in a conversation between them every turn is said by one and mostly
  addressed to the other, so a name matches the short turns that only say it
  ("Melanie: Bye, Caroline!"), and a speaker's own turns say "I", not their name.
- ``asks_advice``: a turn asking for a suggestion or tips for its speaker (the zone then
  keeps a share for what the user said about themselves: ``profile``).
- ``months``: the (month, year) pairs a question names ("in April 2022"), so turns
  from sessions dated then can be preferred.
"""

from __future__ import annotations

import functools
import re

from context_engine.proxy.engine.messages import SPEAKER
from context_engine.proxy.store.memo import memoize
from context_engine.rules.acknowledgements import is_acknowledgement

_WORD = re.compile(r"[A-Za-z0-9_@.\-/:]+|[\u3400-\u9fff\uf900-\ufaff]+")
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
# Lookaheads are bounded (an id names its digit and letter within 64 characters), and
# patterns that scan a run start only where the run starts: a search then reads each
# run once, where an unanchored ``[a-z]+\(`` rescans a 100k-letter run from each letter.
_ID = re.compile(r"\b(?=[A-Za-z0-9_\-]{0,63}\d)(?=[A-Za-z0-9_\-]{0,63}[A-Za-z_])[A-Za-z0-9_\-]{4,}\b")
_NUMBER = re.compile(r"\b\d[\d,.:]*\b")
_DATE = re.compile(
    r"\b(\d{4}-\d{2}-\d{2}|\d{1,2}/\d{1,2}(/\d{2,4})?|"
    r"(jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]{0,6}\.? \d{1,2}|"
    r"\d{1,2} (jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]{0,6})\b"
    r"|(?<!\d)\d+[年月日]",
    re.IGNORECASE,
)
_CODE = re.compile(r"(?<![A-Za-z_])[A-Za-z_]+\(|(?<![a-z])[a-z]+_[a-z_]+|(?<![a-z])[a-z]+[A-Z][A-Za-z]+"
                   r"|(?<!\w)\w+\.\w+\(|`")

_STOP = {
    "the", "a", "an", "and", "or", "of", "to", "in", "on", "at", "for", "with", "is", "are",
    "was", "were", "be", "been", "do", "does", "did", "what", "when", "where", "who", "which",
    "how", "why", "that", "this", "it", "its", "as", "by", "from", "i", "you", "he", "she",
    "we", "they", "my", "your", "his", "her", "their", "our", "me", "him", "them", "us", "so",
    "but", "if", "about", "have", "has", "had", "not", "no", "yes", "can", "could", "would",
    "will", "just", "any", "some", "there", "here", "than", "then", "too", "very", "also",
    "into", "out", "up", "down", "over", "all", "more", "most", "such", "s", "t", "m", "re",
    "ve", "ll", "d", "am", "im", "it's", "i'm", "that's", "what's", "kind", "type",
}


SESSION = re.compile(r"^\[((?:Session|Conversation|Day|Date)[^\]\n]{0,80})\]\s*\n?")  # a turn's date header
TODAY = re.compile(r"^\((?:today|now|date|current date)\s*:[^)\n]{0,80}\)\s*", re.IGNORECASE)  # "(today: …)"
_ASK = re.compile(
    r"[?？]|^\s*(what|when|where|who|whom|whose|which|why|how|did|do|does|was|were|is|are|can|could|"
    r"remind|recall|remember|tell me|show me|list|find|look up|check)\b|"
    r"\b(remember|remind me|last time|earlier|before|previously|again)\b|"
    r"吗|什么|多少|哪|几|怎么|谁|何时|记得|之前|上次",
    re.IGNORECASE,
)
# a pointer to an earlier chat with the assistant (between named people, "since our last
# chat" is small talk)
_POINTER = re.compile(r"\b(going back to our|(?:previous|earlier|last|other) "
                      r"(?:chat|conversation|discussion|session)s?)\b", re.IGNORECASE)


def needs_memory(query: str, window: list[str], memory_terms: set[str], always: bool,
                 advice: bool = True, unseen: frozenset[str] = frozenset(),
                 pointers: bool = True) -> bool:
    """The gate: with ``always`` every turn but an acknowledgement, else ``asks_for_memory``
    against the terms the visible ``window`` already shows, but ``unseen`` (terms the
    window shows while the memory holds more on them: ``updates.unseen_subject``)."""
    if always:
        return not is_acknowledgement(query)
    visible = {t for text in window for t in terms(text)} - unseen
    return asks_for_memory(query, visible, memory_terms, advice, pointers)


def asks_for_memory(query: str, visible_terms: set[str], memory_terms: set[str],
                    advice: bool = True, pointers: bool = True) -> bool:
    """A turn needs memory when it names an id, or mainly asks something (its questions,
    recall cues and dates hold at least as many words as what it tells), and names at
    least one term that the visible window lacks and the memory holds. A turn that tells
    news and ends with a question back ("Wow, great pic! … Did you see that band?") is
    conversation about what was just said; a leading ``[Session …]`` date header, a
    ``(today: …)`` date and the speaker's name are the turn's metadata, not an ask. A
    sentence that points back to an earlier chat ("I'm going back to our previous
    conversation about…") is a recall cue, so it asks (with ``pointers``: a user and an
    assistant); "you mentioned…" alone is not (in a chat between friends it is mostly
    small talk). A turn that asks for advice
    ("I'm stuck with my paintings. Any ideas?") asks with all it tells: what it tells is
    what the advice is about (``advice``: on with ``self_share``)."""
    if is_acknowledgement(query):
        return False
    body = SPEAKER.sub("", TODAY.sub("", SESSION.sub("", query.strip(), count=1), count=1), count=1)
    sentences = [s for s in re.split(r"(?<=[.!?？。！])\s+", body) if s.strip()]
    def asking(s: str) -> bool:
        return bool(_ASK.search(s) or pointers and _POINTER.search(s))

    asks = sentences if advice and asks_advice(body) else [s for s in sentences if asking(s)]
    ids = _ID.findall(body)
    exact = ids + [m.group(0) for m in _DATE.finditer(body)]
    told = sum(len(terms(s)) for s in sentences if not asking(s))
    if not ids and sum(len(terms(s)) for s in asks) + len(exact) < told:
        return False  # an id always asks (an order or ticket named is one to look up)
    novel = {t for s in asks + exact for t in terms(s) if t in memory_terms and t not in visible_terms}
    return bool(novel)


_ADVICE = re.compile(
    r"\b(suggest\w*|recommend\w*|advi[cs]e|tips?|ideas?|what should I|should I)\b", re.IGNORECASE)
_PERSONAL = re.compile(r"(?<![\w'’])(I|you|your|my|me)(?![\w])", re.IGNORECASE)


def asks_advice(query: str) -> bool:
    """A turn asking for a suggestion, tips or advice for its speaker ("Can you suggest a
    hotel?", "Any tips?", "What should I serve…"): a question holding an advice word, in
    a turn with a first- or second-person word ("What did Caroline recommend?" is a
    question about the past; "I got great tips." asks nothing)."""
    return bool(_PERSONAL.search(query)) and any(
        _ADVICE.search(s) and _ASK.search(s) for s in re.split(r"(?<=[.!?？。！])\s+", query))


_BROAD = re.compile(
    r"^\s*(would|could|might|is it likely|what (might|would|could|kind|are|activities)|"
    r"how many|which \w+s\b)|\b(likely|might|potentially|probably|would)\b|"
    r"\b(both|all|some|ever)\b|\bwhat \w+s (has|have|did|does|do)\b",
    re.IGNORECASE,
)
_SECOND_PERSON = re.compile(r"\b(you|your|yours|yourself)\b", re.IGNORECASE)


def is_broad(query: str) -> bool:
    """A question that asks for several things or a judgement drawn from many turns:
    "What books has Tim read?", "How many games…", "Would Caroline…", "…likely…".
    Only a question (it ends with "?") that is not put to the other speaker ("Would
    you…?" is conversation, not a question about the past)."""
    text = query.strip()
    return text.endswith(("?", "？")) and not _SECOND_PERSON.search(text) \
        and bool(_BROAD.search(text))


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            word = word[: -len(suffix)]
            if suffix in ("ing", "ed") and len(word) > 3 and word[-1] == word[-2]:
                word = word[:-1]  # running -> run
            return word
    return word


def terms(text: str) -> list[str]:
    """BM25 terms: stemmed lower-case words without stopwords; CJK as character bigrams."""
    return list(_terms(text))


@memoize(max_entries=65_536, max_bytes=64 * 1024 * 1024)  # texts recur: clients resend history
def _terms(text: str) -> tuple[str, ...]:
    out: list[str] = []
    for token in _WORD.findall(text):
        out += _token_terms(token) if len(token) <= _TOKEN_CHARS else _word_terms(token)
    return tuple(out)


_TOKEN_CHARS = 32  # words up to this long are memoised: a history's words recur, its first
# request tokenizes every turn (a cold 115k-token LongMemEval history: ~165 -> ~85 ms)


@functools.lru_cache(maxsize=65_536)
def _token_terms(token: str) -> tuple[str, ...]:
    return _word_terms(token)


def _word_terms(token: str) -> tuple[str, ...]:
    """The terms of one ``_WORD`` match."""
    if _CJK.match(token):
        return tuple(token[i:i + 2] for i in range(max(1, len(token) - 1)))
    word = token.lower().strip(".-/:")
    if not word or word in _STOP:
        return ()
    if "-" in word and not any(c.isdigit() for c in word):  # de-stress: destress, de, stress
        return (_stem(word.replace("-", "")), *(_stem(w) for w in word.split("-") if w and w not in _STOP))
    return (_stem(word) if word.isalpha() else word,)


def bm25_weight(query: str, base: float, boosted: float) -> float:
    """The weight of BM25 in the fused score: ``boosted`` when the query holds ids,
    numbers, dates or code-like tokens, else ``base``."""
    if _ID.search(query) or _NUMBER.search(query) or _DATE.search(query) or _CODE.search(query):
        return boosted
    return base


_PAIR = re.compile(r"\b([A-Z][a-z]+)(?:'s|’s|')? (?:and|&) ([A-Z][a-z]+)(?:'s|’s|')?")


def sub_queries(query: str, names: frozenset[str] = frozenset()) -> list[str]:
    """The query itself, then its parts when it joins several asks with and/or/commas/和.

    Two names joined ("Did John and James study together?") make one form per name
    ("Did John study together?", "Did James study together?"), not a part holding only
    a name ("Did John"); a part whose words are all ``names`` (the speakers' names as
    ``terms``) is no ask of its own."""
    pair = _PAIR.search(query)
    if pair:
        return [query] + [query[:pair.start()] + name + query[pair.end():] for name in pair.groups()]
    parts = re.split(r",|;| and | or |\band\b|和|以及|或者|、", query)
    parts = [p.strip(" ?？.") for p in parts]
    parts = [p for p in parts if set(terms(p)) - names and p != query.strip(" ?？.")]
    return [query] + (parts if len(parts) >= 2 else [])


def without_names(query: str, speakers: set[str]) -> str:
    """``query`` without the first names (with "'s", and "X and Y" together) of
    ``speakers`` (lower-case names, as ``Chunk.speaker``)."""
    names = sorted({s.split(" ")[0] for s in speakers if s})
    if not names:
        return query
    one = rf"\b(?:{'|'.join(map(re.escape, names))})(?:'s|’s|')?(?!\w)"
    out = re.sub(rf"{one}(?:\s+(?:and|&)\s+{one})*", " ", query, flags=re.IGNORECASE)
    return " ".join(out.split()) if out != query else query


_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
           "september", "october", "november", "december")
_MONTH_YEAR = re.compile(rf"\b({'|'.join(_MONTHS)}|sept|{'|'.join(m[:3] for m in _MONTHS)})\.?"
                         r"(?:\s+\d{1,2}(?:st|nd|rd|th)?)?,?\s+(\d{4})\b", re.IGNORECASE)


@memoize(max_entries=4096, max_bytes=16 * 1024 * 1024)
def months(text: str) -> frozenset[tuple[str, str]]:
    """The (month, year) pairs named in ``text``: "April 2022", "Aug 15, 2023"."""
    return frozenset((_full_month(m), y) for m, y in _MONTH_YEAR.findall(text))


def _full_month(name: str) -> str:
    low = name.lower()
    return next(m for m in _MONTHS if m.startswith(low[:3]))


_TITLE = re.compile(r'"([^"\n]{3,60})"|“([^”\n]{3,60})”')
_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b([A-Z][a-z]+(?: [A-Z][a-z]+)*)")


def linked_entities(texts: list[str], speakers: set[str], asked: set[str]) -> list[str]:
    """Names and quoted titles in ``texts`` (the best hits) that the question did not
    name: "Becoming Nicole", "Sweden". Sentence-initial words and speakers are skipped.
    Searching for them finds the other turns about the same thing (the second hop)."""
    found: set[str] = set()
    for text in texts:
        body = SPEAKER.sub("", text, count=1)
        names = [a or b for a, b in _TITLE.findall(body)] + _NAME.findall(body)
        for name in names:
            words = terms(name)
            first = name.split(" ")[0].lower()
            if words and name.lower() not in speakers and first not in speakers \
                    and not set(words) <= asked:
                found.add(name)
    return sorted(found)


