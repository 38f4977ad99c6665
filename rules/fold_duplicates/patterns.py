"""Text patterns for ``fold_duplicates``: normalization, fillers, configuration changes.

Everything here is a pure function of one message's text, so a decision based on it
never depends on what the rest of the request holds. Patterns are deliberately narrow:
a missed fold costs a few tokens, a wrong fold loses a fact.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from context_engine.proxy.engine.messages import made_of
from context_engine.proxy.store.memo import memoize
from context_engine.rules.acknowledgements import ACK_PHRASES

# Punctuation that only decorates text: quotes and brackets around a word, sentence marks
# after it (never inside a word or before it, so "3.5" ≠ "35" and "-5" ≠ "5") and, for
# CJK, wherever it appears.
_QUOTES = "\"'()[]{}`*“”‘’«»"
_TRAILING = _QUOTES + ".,!?;:…"
_CJK_PUNCT = re.compile(r"[，。！？、；：“”‘’（）《》【】…—～·「」『』]")


@memoize(max_entries=20_000, max_bytes=32 * 1024 * 1024)
def normalize(text: str) -> str:
    """Casefold, drop CJK punctuation and word-edge punctuation, collapse whitespace.

    Memoised (entry and byte caps): clients resend their whole history, so most texts
    were seen before. Word by word with ``str.strip`` (linear; a regex for "punctuation
    at a word's end" retries a long run of ``!`` from each of its characters).
    """
    words = (w.lstrip(_QUOTES).rstrip(_TRAILING) for w in _CJK_PUNCT.sub(" ", text.casefold()).split())
    return " ".join(w for w in words if w)


def shingles(norm: str, size: int = 3) -> frozenset[str]:
    """Word ``size``-shingles of a normalized text (the words themselves if it is shorter)."""
    words = norm.split(" ")
    if len(words) <= size:
        return frozenset([norm])
    return frozenset(" ".join(words[i:i + size]) for i in range(len(words) - size + 1))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a or not b:
        return 0.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


def in_order_subset(words: tuple[str, ...], earlier: tuple[str, ...]) -> bool:
    """True when ``words`` is ``earlier`` with some words left out (same order, nothing new)."""
    rest = iter(earlier)
    return all(w in rest for w in words)


def head_words(text: str, words: int = 4, chars: int = 32) -> str:
    """The first words of ``text`` on one line, to name a message in a reference."""
    return " ".join(text.split()[:words])[:chars].rstrip()


# --- filler acknowledgements (the vocabulary: rules/acknowledgements.py) -------------

_ACKS = frozenset(ACK_PHRASES)
_ACK_LONGEST = max(map(len, ACK_PHRASES))


def is_ack(text: str, max_chars: int) -> bool:
    """True when ``text`` is short, asks nothing and is wholly filler acknowledgements."""
    if not text or len(text) > max_chars or asks_question(text):
        return False
    norm = normalize(text)
    return made_of(norm, _ACKS, _ACK_LONGEST)


def asks_question(text: str) -> bool:
    """True when ``text`` ends with a question (a following "ok" may then be consent)."""
    return text.rstrip().endswith(("?", "？"))


# --- configuration changes ------------------------------------------------------------


@dataclass(frozen=True)
class ConfigChange:
    """"<before><value><after>" sets ``key``; ``key`` is "" for a bare correction."""

    key: str
    before: str
    value: str
    after: str

    def with_value(self, value: str) -> str:
        return self.before + value + self.after


_END = r"(?P<after>\s*(?:[.!。！]\s*)?)$"
_EN_SET = re.compile(
    r"^(?P<before>\s*(?:please\s+)?(?:set|change|switch|turn|update)\s+(?:the\s+|my\s+)"
    r"(?P<key>[a-z][a-z -]{0,30}?)\s+(?:to|into)\s+)(?P<value>[\w#][\w# -]{0,30}?)" + _END,
    re.IGNORECASE)
_EN_MAKE = re.compile(
    r"^(?P<before>\s*(?:please\s+)?make\s+(?:the\s+|my\s+)(?P<key>[a-z][a-z-]{0,20})\s+)"
    r"(?P<value>[\w#-]{1,20})" + _END, re.IGNORECASE)
_ZH_SET = re.compile(
    r"^(?P<before>\s*(?:请)?把(?P<key>[^，,。！!？?\s]{1,12}?)(?:改成|改为|换成|设为|设置为|调成))"
    r"(?P<value>[^，,。！!？?\s]{1,20}?)(?P<after>吧?\s*(?:[。！!]\s*)?)$")
_EN_FIX = re.compile(
    r"^\s*(?:no|nope|actually|wait)\s*(?:[,，]\s*)?(?:make it\s+|use\s+|change it to\s+)?"
    r"(?P<value>[\w#-]{1,20})(?:\s+instead)?\s*(?:[.!]\s*)?$", re.IGNORECASE)
_ZH_FIX = re.compile(
    r"^\s*(?:(?:不对[，,]?|不[，,]|算了[，,]?)\s*)?(?:还是)?(?:改成|换成|改为|用)"
    r"(?P<value>[^，,。！!？?\s]{1,12}?)吧?\s*(?:[。！!]\s*)?$")
# Words a bare correction never names as a value ("no, thanks" is not a correction).
_NOT_VALUES = frozenset(
    {"thanks", "thank", "problem", "way", "worries", "need", "idea", "it", "that", "this",
     "not", "never", "none", "one", "wait", "sorry", "please", "ok", "okay", "sure"})
_JOINERS = frozenset({"and", "to", "then", "also", "but", "plus", "with", "or"})
# A change of the object acted on ("switch from Baidu to Bing") is never a config change.
_OBJECT_SWITCH = re.compile(r"\bfrom\b|从", re.IGNORECASE)


def _compound(value: str) -> bool:
    """A value that says more than one thing ("red and the font to Arial")."""
    words = normalize(value).split(" ")
    return len(words) > 3 or any(w in _JOINERS for w in words)


def parse_config_change(text: str) -> ConfigChange | None:
    """The configuration change ``text`` makes, or None when it is anything else."""
    if len(text) > 120 or "\n" in text.strip() or _OBJECT_SWITCH.search(text):
        return None
    for pattern in (_EN_SET, _EN_MAKE, _ZH_SET):
        m = pattern.match(text)
        if m:
            key = normalize(m.group("key"))
            if not key or key in ("it", "this", "that") or _compound(m.group("value")):
                return None
            return ConfigChange(key, m.group("before"), m.group("value"), m.group("after"))
    for pattern in (_EN_FIX, _ZH_FIX):
        m = pattern.match(text)
        if m and m.group("value").casefold() not in _NOT_VALUES:
            return ConfigChange("", "", m.group("value"), "")
    return None
