"""What a cleared tool result keeps in its placeholder: its skeleton.

Coding agents read code, search results and tracebacks, and their next commands reuse
the names, paths and line numbers those showed. A cleared result keeps, in order and
once each, the lines that define something (``def``/``class``/``function`` with the line
number an ``nl``/``cat -n``/``grep -n`` print put before it), the ``path:line`` of search
hits (the path alone for a ``grep`` without ``-n``), traceback frames
(``File "…", line N, in f``) and the lines that report an error (``KeyError: 'x'``,
``E   AssertionError``, ``FAILED tests/…``; not code that names one, such as
``except KeyError:``), each cut short, up to ``limit`` characters. When they do not all
fit, the outermost traceback frames go first: the innermost ones, next to the error,
name the code that failed. Everything else is in the original (``orig:`` id).

Every pattern is anchored and free of nested quantifiers (linear time on any text).
"""

from __future__ import annotations

import re

ITEM_CHARS = 80
_NUMBERED = r"(?:\d{1,6}[:\t ]\s{0,8})?"
DEFINITION = re.compile(_NUMBERED + r"(?:async def|def|class|function|func|fn|interface|struct)\s"
                        r"[\w.$]{1,80}")
SEARCH_HIT = re.compile(r"[\w.][\w./-]{0,200}\.\w{1,8}:\d{1,7}(?=:)")
GREP_FILE = re.compile(r"[\w.][\w.-]{0,100}/[\w./-]{0,200}\.\w{1,8}(?=:)")
FRAME = re.compile(r'File "[^"\n]{1,300}", line \d{1,7}(?:, in [\w<>.]{1,80})?')
ERROR = re.compile(r"(?:E\s{1,8})?(?:[a-z_]\w{0,40}\.){0,8}[A-Z]\w{0,60}(?:Error|Exception|Warning)"
                   r"(?::[^\n]{0,60}|\s*$)|(?:FAILED|ERROR)\s[^\n]{1,60}")
PATTERNS = (DEFINITION, SEARCH_HIT, GREP_FILE, FRAME, ERROR)


def skeleton(text: str, limit: int) -> str:
    """The skeleton of ``text`` (module docstring), at most ``limit`` characters."""
    if limit <= 0:
        return ""
    items: list[tuple[str, bool]] = []  # (item, is a frame), in the text's order
    seen: set[str] = set()
    for raw in text.splitlines():
        line = raw.strip()
        for pattern in PATTERNS:
            m = pattern.match(line)
            if m is not None:
                found = " ".join(m.group(0).split())[:ITEM_CHARS]
                if found not in seen:
                    seen.add(found)
                    items.append((found, pattern is FRAME))
                break
    used = sum(len(item) + 3 for item, _ in items)
    frames = [k for k, (_, frame) in enumerate(items) if frame]
    dropped: set[int] = set()
    for k in frames:  # outermost first
        if used <= limit:
            break
        dropped.add(k)
        used -= len(items[k][0]) + 3
    kept, used = [], 0
    for k, (item, _) in enumerate(items):
        if k in dropped:
            continue
        if used + len(item) + 3 > limit:
            break
        kept.append(item)
        used += len(item) + 3
    return " | ".join(kept)
