"""What a reply billed, read out of its bytes: the one record every dialect fills.

``prompt_tokens`` is always every input token the upstream billed, cache reads and
writes included, so the APIs compare; ``cached_tokens`` the cache reads,
``cache_write_tokens`` the cache writes (where an API bills them apart). Each dialect's
``take_usage`` reads one body or stream event into it; bad values are noted (for the
ledger) and ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_TEXT = 200_000


@dataclass
class Usage:
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    text_parts: list[str] = field(default_factory=list)
    cache_write_tokens: int | None = None
    notes: list[str] = field(default_factory=list)  # malformed usage, kept for the ledger
    iterated: bool = False  # Anthropic: counts summed over usage.iterations; they stand
    text_chars: int = field(default=0, repr=False, compare=False)  # in text_parts

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    def add_text(self, s: Any) -> None:
        """Keep ``s`` (a piece of the reply's text), up to ``MAX_TEXT`` characters."""
        if isinstance(s, str) and self.text_chars < MAX_TEXT:
            self.text_parts.append(s)
            self.text_chars += len(s)

    def count(self, d: dict[str, Any], key: str) -> int | None:
        """``d[key]`` when it is a count; a bad value is noted and read as absent."""
        v = d.get(key)
        if v is None:
            return None
        n = as_int(v)
        if n is None or n < 0:
            self.note(f"usage {key}={str(v)[:30]!r} is not a count")
            return None
        return n

    def note(self, text: str) -> None:
        if text not in self.notes and len(self.notes) < 5:
            self.notes.append(text)


def as_dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def as_list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def as_int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None
