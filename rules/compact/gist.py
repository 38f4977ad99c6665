"""What a cleared tool result keeps in its placeholder: its skeleton.

Coding agents read code, search results and tracebacks, and their next commands reuse
the names, paths and line numbers those showed. A cleared result keeps, in order and
once each, the lines that define something (``def``/``class``/``function`` with the line
number an ``nl``/``cat -n``/``grep -n`` print put before it), the ``path:line`` of search
hits, traceback frames (``File "…", line N, in f``) and error lines, each cut short, up
to ``limit`` characters. Everything else is in the original (``orig:`` id).

Every pattern is anchored and free of nested quantifiers (linear time on any text).
"""

from __future__ import annotations

import re

ITEM_CHARS = 80
_NUMBERED = r"(?:\d{1,6}[:\t ]\s{0,8})?"
DEFINITION = re.compile(_NUMBERED + r"(?:async def|def|class|function|func|fn|interface|struct)\s"
                        r"[\w.$]{1,80}")
SEARCH_HIT = re.compile(r"[\w.][\w./-]{0,200}\.\w{1,8}:\d{1,7}(?=:)")
FRAME = re.compile(r'File "[^"\n]{1,300}", line \d{1,7}(?:, in [\w<>.]{1,80})?')
ERROR = re.compile(r"[A-Z]\w{0,60}(?:Error|Exception|Warning|Failed|FAILED)\b[^\n]{0,60}")


def skeleton(text: str, limit: int) -> str:
    """The skeleton of ``text`` (module docstring), at most ``limit`` characters."""
    if limit <= 0:
        return ""
    items: list[str] = []
    seen: set[str] = set()
    used = 0
    for raw in text.splitlines():
        line = raw.strip()
        found = None
        for pattern in (DEFINITION, SEARCH_HIT, FRAME, ERROR):
            m = pattern.match(line) if pattern is not ERROR else pattern.search(line[:200])
            if m is not None:
                found = " ".join(m.group(0).split())[:ITEM_CHARS]
                break
        if found is None or found in seen:
            continue
        if used + len(found) + 3 > limit:
            break
        seen.add(found)
        items.append(found)
        used += len(found) + 3
    return " | ".join(items)
