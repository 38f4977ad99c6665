"""``recall:`` settings: the ``context_recall`` tool the proxy answers itself (README, "Recall").

Validated at start-up; a bad key or value stops the server, naming ``recall.<key>``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RecallOptions:
    enabled: bool = field(default=True, metadata={
        "help": "offer context_recall (all three APIs, when the client sent tools) once a "
                "session's rewrite is lossy, and answer its calls inside the proxy"})
    max_rounds: int = field(default=3, metadata={
        "help": "extra upstream calls one request may make to answer recall calls (1-10); "
                "the last one goes without the tool"})
    max_chars: int = field(default=24000, metadata={
        "help": "longest recalled text returned to the model for one call (cut beyond)"})
    max_calls: int = field(default=8, metadata={
        "help": "recall calls of one reply that are answered (1-100); the rest answer "
                "\"too many calls\""})
    max_total_chars: int = field(default=96000, metadata={
        "help": "recalled text one request's follow-ups may carry in all; later calls "
                "answer that the budget is spent"})
    min_gap_chars: int = field(default=200, metadata={
        "help": "turns that left the request name themselves in a marker only when they "
                "held at least this many characters"})
    max_held_bytes: int = field(default=1_000_000, metadata={
        "help": "a streamed reply is held from its first context_recall call; past this "
                "many bytes it is relayed instead, its recall calls left out"})


_BOUNDS = {"max_rounds": (1, 10), "max_chars": (200, 1_000_000), "max_calls": (1, 100),
           "max_total_chars": (200, 10_000_000), "min_gap_chars": (0, 1_000_000),
           "max_held_bytes": (1024, 1 << 30)}


def parse_recall(value: Any, error: type[Exception]) -> RecallOptions:
    if value is None:
        return RecallOptions()
    valid = [f.name for f in dataclasses.fields(RecallOptions)]
    if not isinstance(value, Mapping):
        raise error(f"recall: expected a mapping ({', '.join(valid)})")
    out: dict[str, Any] = {}
    for key, v in value.items():
        if key not in valid:
            raise error(f"recall.{key}: unknown option; valid options: {', '.join(valid)}")
        if key == "enabled":
            if not isinstance(v, bool):
                raise error(f"recall.{key}: expected true or false, got {v!r}")
        else:
            low, high = _BOUNDS[key]
            if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
                raise error(f"recall.{key}: expected a whole number from {low} to {high}, got {v!r}")
        out[str(key)] = v
    return RecallOptions(**out)
