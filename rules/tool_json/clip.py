"""An oversized result as its head and tail around a marker that lists the identifiers
of the middle it cut (``rules/identifiers.py``: URLs, e-mails, letter-digit ids), so a
next call that takes one of them still finds it as written. The text is then at most
``limit`` characters long, so a second pass leaves it alone."""

from __future__ import annotations

from collections.abc import Callable

from context_engine.rules.identifiers import listed_within, text_identifiers


def clip(body: str, limit: int, marker: Callable[[str], str], what: str) -> str:
    """``body`` (longer than ``limit``) cut to ``limit`` characters around ``marker(what)``;
    the marker's ``what`` also lists the cut middle's identifiers, in up to a quarter of
    ``limit``."""
    line = "\n" + marker(what) + "\n"
    head, tail = _ends(body, limit - len(line))
    plain = head + line + tail
    ids = listed_within(text_identifiers(body[len(head):len(body) - len(tail)]), limit // 4)
    if not ids:
        return plain
    extra = len(", identifiers in it: ")
    head, tail = _ends(body, limit - len(line) - extra - limit // 4)
    ids = listed_within(text_identifiers(body[len(head):len(body) - len(tail)]), limit // 4)
    listed = f"{head}\n{marker(f'{what}, identifiers in it: {ids}')}\n{tail}"
    return listed if len(listed) <= limit else plain  # a limit the marker alone passes


def _ends(body: str, room: int) -> tuple[str, str]:
    """The head and tail of ``body`` that fit in ``room`` characters, whole lines where it
    has lines."""
    room = max(0, room)
    head = body[:room // 2]
    tail = body[len(body) - (room - room // 2):] if room - room // 2 else ""
    if "\n" in head:
        head = head[:head.rindex("\n")]
    if "\n" in tail:
        tail = tail[tail.index("\n") + 1:]
    return head, tail
