"""Zone delimiters: the per-session marker, neutralising look-alikes, parsing.

A zone is ``<<zone:NAME:MARKER>>`` + newline + body + newline + ``<</zone:NAME>>``. The
marker is in the opening tag only: since no body can hold a ``<</zone`` look-alike (see
below), the first closing tag after an opening tag is always the real one, and leaving
the marker out of it saves 6 tokens per zone.
``MARKER`` is a decimal HMAC of the session id (decimal because o200k/cl100k encode
three digits per token: 15 digits ≈ 50 bits cost 5 tokens, where 12 hex cost 7).

The guarantee that content cannot close its zone or open another does not rest on the
marker being secret: before wrapping, every look-alike of ``<<zone`` / ``<</zone`` in
the body is defanged. Look-alikes are found on a canonical copy of the text: NFKD,
case-folded, format and combining characters (zero-width joiners, accents…) removed, Unicode
confusables of ``<``, ``/`` and of the letters of ``zone`` mapped to ASCII, and HTML and
JSON escapes (``&lt;``, ``&#x7a;``, ``\\u003c``, ``\\/``…) decoded. A look-alike is
one or more ``<`` (spaces allowed between), an optional ``/``, and ``zone`` not followed
by a letter. Its ``<`` characters are replaced by ``[`` in the original text; every
other character is left byte-identical.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import unicodedata

FALLBACK_SALT = b"context-engine/zones/v1"
DEFANG = "["

# Escapes a reader (human or model) decodes: JSON and Python ``\\uXXXX`` / ``\\xXX``, JSON's
# ``\\/``, HTML numeric references and the named entities that matter here.
_ESCAPES = re.compile(
    r"\\u([0-9a-f]{4})|\\x([0-9a-f]{2})|&#x([0-9a-f]{1,6});?|&#([0-9]{1,7});?"
    r"|&(lt|sol|laquo|lsaquo|lang|zwj|zwnj|shy);?|\\(/)",
    re.IGNORECASE,
)
_NAMED = {"lt": "<", "sol": "/", "laquo": "\u00ab", "lsaquo": "\u2039", "lang": "\u27e8",
          "zwj": "\u200d", "zwnj": "\u200c", "shy": "\u00ad"}

# Confusables NFKD leaves alone (full-width and mathematical forms NFKD already maps).
_CONFUSABLES = {
    **dict.fromkeys("\u2039\u2329\u3008\u27e8\u1438\u02c2\u276e\u276c\u29fc\u2989\u1440", "<"),
    **dict.fromkeys("\u00ab\u27ea\u300a\u226a", "<<"),
    "\u22d8": "<<<",
    **dict.fromkeys("\u2044\u2215\u29f8\u141f\u2571\u27cb\u3033", "/"),
    **dict.fromkeys("\u1d22\u0290", "z"),
    **dict.fromkeys("\u043e\u03bf\u0585\u1d0f\u00f8\u0ce6\u0d20", "o"),
    **dict.fromkeys("\u0274\u0578\u057c", "n"),
    **dict.fromkeys("\u0435\u04bd\u1d07\u0454", "e"),
}
_DROPPED = {"Cf", "Mn", "Me", "Cc"}  # invisible: format, combining marks, controls


def session_marker(secret: str, session_id: str, digits: int) -> str:
    """The session's zone marker: ``digits`` decimal digits of HMAC-SHA256(secret, session)."""
    key = secret.encode() if secret else FALLBACK_SALT
    digest = hmac.new(key, session_id.encode(), hashlib.sha256).digest()
    return str(int.from_bytes(digest, "big") % 10**digits).zfill(digits)


def open_tag(name: str, marker: str) -> str:
    return f"<<zone:{name}:{marker}>>"


def close_tag(name: str, marker: str) -> str:
    return f"<</zone:{name}>>"


def wrap(name: str, marker: str, body: str) -> str:
    return f"{open_tag(name, marker)}\n{body}\n{close_tag(name, marker)}"


_ASCII_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")


def _unescape(m: re.Match[str]) -> str:
    hex4, hex2, hexref, decref, named, slash = m.groups()
    if named:
        return _NAMED[named.lower()]
    if slash:
        return "/"
    code = int(hex4 or hex2 or hexref, 16) if decref is None else int(decref)
    return chr(code) if code <= 0x10FFFF else m.group()


def _canon_char(c: str) -> str:
    if c.isascii():
        return "" if _ASCII_CONTROL.match(c) else c.lower()
    out = []
    for ch in unicodedata.normalize("NFKD", c).casefold():
        if unicodedata.category(ch) not in _DROPPED or ch.isspace():
            out.append(_CONFUSABLES.get(ch, ch))
    return "".join(out)


def _may_hold_lookalike(text: str) -> bool:
    """A cheap test (C-speed translate): no look-alike without '<' and 'zone' in canonical form."""
    if "&" in text or "\\" in text:
        text = _ESCAPES.sub(_unescape, text)
    if text.isascii():
        if "<" not in text:
            return False
        low = text.lower()
        return "zone" in (_ASCII_CONTROL.sub("", low) if _ASCII_CONTROL.search(low) else low)
    canon = text.translate({ord(c): _canon_char(c) for c in set(text)})
    return "<" in canon and "zone" in canon


def _canonical(text: str) -> tuple[str, list[int] | None]:
    """The canonical copy of ``text`` and, per canonical char, the index of its source.

    ``None`` stands for the identity: no escapes and every character maps to one.
    """
    memo = {c: _canon_char(c) for c in set(text)}
    if "&" not in text and "\\" not in text and all(len(v) == 1 for v in memo.values()):
        return text.translate({ord(c): v for c, v in memo.items()}), None
    chars: list[str] = []
    source: list[int] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "&\\":
            m = _ESCAPES.match(text, i)
            if m:
                escaped = "".join(_canon_char(ch) for ch in _unescape(m))
                chars.extend(escaped)
                source.extend([i] * len(escaped))
                i = m.end()
                continue
        value = memo[c]
        chars.extend(value)
        source.extend([i] * len(value))
        i += 1
    return "".join(chars), source


def _lookalike_lts(canon: str) -> list[list[int]]:
    """Per look-alike delimiter, the canonical indexes of its '<' characters.

    Walks back from each ``zone`` over spaces, an optional ``/`` and a run of ``<`` and
    spaces: linear in the text (no regex backtracking on long runs of ``<``).
    """
    found: list[list[int]] = []
    start = canon.find("zone")
    while start != -1:
        after = start + 4
        if after >= len(canon) or not (canon[after].isalnum() or canon[after] == "_"):
            j = start
            while j > 0 and canon[j - 1].isspace():
                j -= 1
            if j > 0 and canon[j - 1] == "/":
                j -= 1
            lts = []
            while j > 0 and (canon[j - 1] == "<" or canon[j - 1].isspace()):
                j -= 1
                if canon[j] == "<":
                    lts.append(j)
            if lts:
                found.append(lts)
        start = canon.find("zone", after)
    return found


def neutralise(text: str) -> tuple[str, int]:
    """``text`` with every look-alike delimiter defanged, and how many were found."""
    texts, n = neutralise_parts([text])
    return texts[0], n


def neutralise_parts(texts: list[str]) -> tuple[list[str], int]:
    """Consecutive text parts, defanged as the one text a reader sees when they are
    joined: ``"ok <<"`` then ``"/zone:tool>>"`` is a look-alike too. Each ``<`` of a
    look-alike becomes ``[`` in the part that holds it; parts keep their boundaries."""
    joined = "".join(texts)
    if not _may_hold_lookalike(joined):
        return texts, 0
    canon, source = _canonical(joined)
    found = _lookalike_lts(canon)
    if not found:
        return texts, 0
    per_source: dict[int, int] = {}
    for h in (h for lts in found for h in lts):
        src = h if source is None else source[h]
        per_source[src] = per_source.get(src, 0) + 1
    sources = sorted(per_source)
    out: list[str] = []
    k = start = 0
    for text in texts:
        end = start + len(text)
        if k == len(sources) or sources[k] >= end:
            out.append(text)
            start = end
            continue
        pieces: list[str] = []
        last = start
        while k < len(sources) and sources[k] < end:
            src = sources[k]
            pieces += [joined[last:src], DEFANG * per_source[src]]
            last = min(end, _source_end(joined, src))  # an escape split across parts
            k += 1
        pieces.append(joined[last:end])
        out.append("".join(pieces))
        start = end
    return out, len(found)


def _source_end(text: str, i: int) -> int:
    """End of the source unit starting at ``i`` (one char, or a whole escape)."""
    if text[i] in "&\\":
        m = _ESCAPES.match(text, i)
        if m:
            return m.end()
    return i + 1


def has_lookalike(text: str) -> bool:
    return _may_hold_lookalike(text) and bool(_lookalike_lts(_canonical(text)[0]))


def wrapped_body(text: str, name: str, marker: str) -> str | None:
    """The body if ``text`` is already exactly one ``name`` zone with a clean body."""
    head, tail = open_tag(name, marker) + "\n", "\n" + close_tag(name, marker)
    if len(text) < len(head) + len(tail) or not (text.startswith(head) and text.endswith(tail)):
        return None
    body = text[len(head): len(text) - len(tail)]
    return None if has_lookalike(body) else body


# A line of data that opens like a chat transcript's role label ("System: …", "user:")
# could pass for a turn of that speaker; such a label is quoted ('"System": …').
_ROLE_LABEL = re.compile(
    r"(?im)^([ \t]*)(system|developer|user|assistant|tool|function|human|ai|model)([ \t]*):")


def quote_role_labels(text: str) -> str:
    """``text`` with a role label opening any of its lines quoted, so that a snippet of
    data never poses as a speaker of the conversation."""
    return _ROLE_LABEL.sub(r'\1"\2"\3:', text)


_TAG = r"<<zone:([a-z_]+):{marker}>>|<</zone:([a-z_]+)>>"


def parse(text: str, marker: str) -> tuple[list[tuple[str | None, str]], list[str]]:
    """Split ``text`` by the real delimiters of ``marker``.

    Returns segments ``(zone name, body)`` (``None`` for text outside any zone) and the
    problems: a delimiter inside a zone, a close without an open, an unclosed zone.
    """
    tag = re.compile(_TAG.format(marker=re.escape(marker)))
    segments: list[tuple[str | None, str]] = []
    problems: list[str] = []
    current: str | None = None
    pos = 0
    for m in tag.finditer(text):
        closing, name = m.group(2) is not None, m.group(1) or m.group(2)
        piece = text[pos: m.start()]
        if current is None and not closing:
            segments.append((None, piece))
            current, pos = name, m.end()
        elif current == name and closing:
            segments.append((name, piece))
            current, pos = None, m.end()
        else:
            problems.append(f"delimiter {m.group()!r} at {m.start()} inside zone {current!r}")
    if current is not None:
        problems.append(f"zone {current!r} left open")
    segments.append((current, text[pos:]))
    return [(n, s) for n, s in segments if n is not None or s], problems
