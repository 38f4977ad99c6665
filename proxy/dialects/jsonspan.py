"""Where values lie in JSON text: the spans that let a splice keep the client's bytes.

Each function decodes with the C scanner (``json.JSONDecoder.raw_decode``) and returns
character offsets into the text, so a caller can replace one value and leave every
other byte as it was.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

_decoder = json.JSONDecoder()
_WS = " \t\n\r"


def skip_ws(s: str, i: int) -> int:
    while i < len(s) and s[i] in _WS:
        i += 1
    return i


def array_spans(s: str, start: int) -> list[tuple[int, int]]:
    """``(begin, end)`` of each element of the JSON array whose ``[`` is at ``start``."""
    i = skip_ws(s, start + 1)
    spans: list[tuple[int, int]] = []
    if s[i] == "]":
        return spans
    while True:
        _, end = _decoder.raw_decode(s, i)
        spans.append((i, end))
        i = skip_ws(s, end)
        if s[i] == "]":
            return spans
        i = skip_ws(s, i + 1)  # past ','


def object_spans(s: str) -> tuple[dict[str, Any], dict[str, tuple[int, int]]]:
    """The top-level JSON object of ``s`` and ``key -> (begin, end)`` of each value.

    Raises ``ValueError`` when ``s`` is not exactly one JSON object."""
    i = skip_ws(s, 0)
    if i >= len(s) or s[i] != "{":
        raise ValueError("the body must be a JSON object")
    data: dict[str, Any] = {}
    spans: dict[str, tuple[int, int]] = {}
    i = skip_ws(s, i + 1)
    if i < len(s) and s[i] == "}":
        i += 1
    else:
        while True:
            if i >= len(s) or s[i] != '"':
                raise ValueError(f"expected a key at char {i}")
            key, i = _decoder.raw_decode(s, i)
            i = skip_ws(s, i)
            if i >= len(s) or s[i] != ":":
                raise ValueError(f"expected ':' at char {i}")
            i = skip_ws(s, i + 1)
            data[key], end = _decoder.raw_decode(s, i)
            spans[key] = (i, end)
            i = skip_ws(s, end)
            if i < len(s) and s[i] == ",":
                i = skip_ws(s, i + 1)
                continue
            if i < len(s) and s[i] == "}":
                i += 1
                break
            raise ValueError(f"expected ',' or '}}' at char {i}")
    if skip_ws(s, i) != len(s):
        raise ValueError("extra data after the JSON object")
    return data, spans


def decode(raw: bytes, bad: Callable[[str], Exception]) -> tuple[str, dict[str, Any],
                                                                  dict[str, tuple[int, int]]]:
    """Text, object and value spans of a request body; ``bad(message)`` on any problem."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise bad("The request body is not valid UTF-8.") from None
    try:
        data, spans = object_spans(text)
    except (ValueError, RecursionError) as exc:
        raise bad(f"The request body is not valid JSON: {exc}") from None
    return text, data, spans


def replace_spans(text: str, edits: list[tuple[tuple[int, int], str]]) -> bytes:
    """``text`` with each ``(begin, end)`` span replaced (spans must not overlap)."""
    for (begin, end), new in sorted(edits, key=lambda e: e[0][0], reverse=True):
        text = text[:begin] + new + text[end:]
    return text.encode("utf-8")


def value_start(s: str, begin: int, key: str) -> int:
    """Where the value of ``key`` starts in the JSON object at ``s[begin]`` (only the
    values before it are decoded)."""
    i = skip_ws(s, begin + 1)
    while True:
        k, i = _decoder.raw_decode(s, i)
        i = skip_ws(s, skip_ws(s, i) + 1)
        if k == key:
            return i
        _, i = _decoder.raw_decode(s, i)
        i = skip_ws(s, skip_ws(s, i) + 1)


_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def scrub_surrogates(text: str, data: Any, bad: Callable[[str], Exception]) -> Any:
    """``data`` with each lone UTF-16 surrogate (in keys too) replaced by U+FFFD, or
    ``data`` itself, the same object, when there is none. JSON may escape one
    (``"\\ud800"``, a JS-truncated emoji); Python decodes it into a string UTF-8 cannot
    encode, so nothing downstream (tokenizer, session hash, ledger) could handle it."""
    if "\\" not in text or "\\u" not in text or not _ESCAPED_SURROGATE.search(text):  # memchr first
        return data

    def clean(value: Any) -> Any:
        if isinstance(value, str):
            return _SURROGATE.sub("\ufffd", value)
        if isinstance(value, list):
            return [clean(v) for v in value]
        if isinstance(value, dict):
            return {clean(k): clean(v) for k, v in value.items()}
        return value

    try:
        cleaned = clean(data)
    except RecursionError:
        raise bad("The request body is nested too deeply.") from None
    return data if cleaned == data else cleaned


def decode_request(raw: bytes, bad: Callable[[str], Exception]) -> tuple[
        str, dict[str, Any], dict[str, tuple[int, int]], bool]:
    """``decode``, then ``scrub_surrogates``: text, object (scrubbed), value spans, and
    whether the body can be rewritten (false when it held lone surrogates: such a body
    is forwarded as sent, counted and recorded from the scrubbed copy)."""
    text, data, spans = decode(raw, bad)
    clean = scrub_surrogates(text, data, bad)
    return text, clean, spans, clean is data
