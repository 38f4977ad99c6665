"""Translations remembered across requests. Agents resend their whole history (and
retries resend all but a new last item), so the items a request shares with an earlier
request of its conversation are translated once.

An entry is keyed by the first ``KEY`` characters of an item array's text. It holds the
array's text up to the end of its second-to-last item (or of its last, when the start
of the last cannot be found cheaply) and the adapter's translation of at most those
items. A request whose array text starts with that text holds those items, equal and
at the same places (each item is a JSON object, which ends where its text ends), so the
adapter takes their translation as it is and reads only the rest. Equal items give
equal translations: the result is the same with or without the memo.

Entries are bounded in number and in bytes (each is charged three times its text: the
text and the decoded items its translation keeps alive). Translations are shared
between requests and never mutated (rules never mutate their input).
"""

from __future__ import annotations

import json
import re
from typing import Any

from context_engine.proxy.store.memo import BoundedCache

KEY = 1024  # characters; shorter arrays are cheap to translate and are not kept
PER_KEY = 4  # conversations that start alike (the same long first item) share a key
CHARGE = 3
MAX_LAST = 64 * 1024  # characters searched for the start of the last item
_decoder = json.JSONDecoder()
_NEXT_OBJECT = re.compile(r",[ \t\n\r]*\{")
_WS = " \t\n\r"


def last_item_start(text: str, begin: int, last_end: int, last: Any) -> int | None:
    """The comma before the array's last item (``last``, whose text ends at
    ``last_end``), or None when it is not within ``MAX_LAST`` characters."""
    window, checked = 1024, last_end
    while True:
        low = max(begin, last_end - window)
        starts = [m.start() for m in _NEXT_OBJECT.finditer(text, low, checked)]
        for comma in reversed(starts):
            try:
                obj, end = _decoder.raw_decode(text, text.index("{", comma))
            except ValueError:
                continue
            if end == last_end and obj == last:
                return comma
        if low == begin or window >= MAX_LAST:
            return None
        checked, window = low + 1, window * 4  # a match at ``low`` may start a bit before it


class TranslationMemo:
    def __init__(self, max_entries: int = 256, max_bytes: int = 16 * 1024 * 1024) -> None:
        self.cache: BoundedCache[str, tuple[tuple[str, Any], ...]] = BoundedCache(
            max_entries, max_bytes)
        self.hits = self.misses = 0

    def find(self, text: str, begin: int) -> Any:
        """The kept translation whose text begins the array at ``text[begin]``, or None."""
        for prefix, state in self.cache.get(text[begin:begin + KEY]) or ():
            if text.startswith(prefix, begin):
                self.hits += 1
                return state
        self.misses += 1
        return None

    def keep(self, text: str, span: tuple[int, int], last: Any, state: Any) -> None:
        """Remember ``state``: the translation of at most all but the last item of the
        array at ``span`` (whose last item is ``last``)."""
        begin, end = span
        last_end = end - 1  # the closing bracket
        while last_end > begin and text[last_end - 1] in _WS:
            last_end -= 1
        if last_end - begin <= KEY:
            return
        comma = last_item_start(text, begin, last_end, last)
        stop = last_end if comma is None else comma
        while text[stop - 1] in _WS:
            stop -= 1
        if stop - begin <= KEY:
            return
        key = text[begin:begin + KEY]
        kept = self.cache.get(key) or ()
        if any(len(p) == stop - begin and text.startswith(p, begin) for p, _ in kept):
            return  # kept already (a retry, or a request with another last item)
        prefix = text[begin:stop]
        older = [e for e in kept if not prefix.startswith(e[0])]
        entries = ((prefix, state), *older[:PER_KEY - 1])
        self.cache.put(key, entries, cost=sum(CHARGE * len(p) for p, _ in entries))
