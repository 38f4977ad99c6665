"""What a cleared result keeps whatever the tool: the identifiers a next call takes.

Agents act on what older results named: the id of an order from a listing, the URL of a
search hit, a row's key, a flight number, a path. A cleared result keeps them in its
placeholder, so the next call that needs one still finds it as written:

- a **JSON** result keeps every key and every scalar value, in the notation
  ``tool_json`` uses (``key:value`` lines, tables of rows), except text: a string with
  spaces longer than ``TEXT_CHARS`` (a description, a page, a review) becomes ``...``.
  Ids, names, numbers, dates, URLs and short labels all stay.
- a **text** result keeps its URLs and e-mail addresses and the tokens that mix letters
  and digits (``HAT069``, ``W2378156``, ``v0.115.0``, ``B12``; not code's ``snake_case_2``), in order and once each,
  after its code skeleton (``gist.py``).

Where the identifiers are more than half the result, clearing would not pay for the
risk: ``compact`` keeps the result whole instead (``compact/rule.py``). ``tool_json`` lists
the identifiers of the middle it cuts from an oversized result in its marker.

Every pattern is anchored or bounded and free of nested quantifiers (linear time).
"""

from __future__ import annotations

import re
from typing import Any

from context_engine.rules.tool_json.compact import CompactOptions, parse_container, prune, render

TEXT_CHARS = 120  # a string with spaces longer than this is text, not an identifier
CUT = "..."
URL = re.compile(r"https?://[^\s<>\"'`)\]]{1,400}")
EMAIL = re.compile(r"[\w.+-]{1,64}@[\w-]{1,63}(?:\.[\w-]{1,63}){1,8}")
MIXED = re.compile(r"(?<![\w.-])(?=[A-Za-z0-9.-]{0,40}\d)(?=[A-Za-z0-9.-]{0,40}[A-Za-z])"
                   r"[A-Za-z0-9][A-Za-z0-9.-]{2,40}(?![\w])")  # not code's snake_case names
TRAILING = ".,;:"
MAX_ITEMS = 400  # identifiers listed at most (a pathological result is kept whole instead)


def _cut_text(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _cut_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut_text(v) for v in value]
    if isinstance(value, str) and len(value) > TEXT_CHARS and " " in value:
        return CUT
    return value


def json_identifiers(value: Any, ascii_only: bool = True) -> str:
    """The keys and scalar values of a parsed JSON ``value``, its text fields cut."""
    opts = CompactOptions(ascii_only=ascii_only)
    return render(prune(_cut_text(value), opts), opts)


def text_identifiers(text: str, known: str = "") -> list[str]:
    """URLs, e-mail addresses and letter-digit tokens of ``text``, in order, once each,
    leaving out those ``known`` (the skeleton) already holds."""
    found: dict[str, None] = {}
    for line in text.splitlines():
        spans = []
        for pattern in (URL, EMAIL):
            for m in pattern.finditer(line):
                spans.append((m.start(), m.end()))
                found.setdefault(m.group(0).rstrip(TRAILING), None)
        for m in MIXED.finditer(line):
            if not any(a <= m.start() < b for a, b in spans):
                found.setdefault(m.group(0).rstrip(TRAILING), None)
        if len(found) > MAX_ITEMS:
            break
    return [s for s in found if s and s not in known]


def identifiers(text: str, skeleton: str) -> str | None:
    """What the placeholder of the result ``text`` lists after its ``skeleton``, or None when
    there are too many to list (keep the result)."""
    value = parse_container(text)
    if value is not None:
        return json_identifiers(value, text.isascii())
    items = text_identifiers(text, skeleton)
    if len(items) > MAX_ITEMS:
        return None
    return " ".join(items)


def listed_within(items: list[str], chars: int) -> str:
    """``items`` joined by spaces, as many as fit in ``chars`` (in order)."""
    out: list[str] = []
    used = 0
    for item in items:
        if used + len(item) + 1 > chars:
            break
        out.append(item)
        used += len(item) + 1
    return " ".join(out)
