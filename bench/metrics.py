"""The bench's measures, as pure functions over messages.

- tokens: ``TokenCounter.request`` (per-message overhead and tool schemas included);
- evidence: a probe is retained when every evidence substring occurs in the text a
  model would read: message contents (strings or text parts), names, tool-call
  arguments (raw and JSON-decoded) and anything injected as a message; roles, ids and
  types are not text;
- prefix stability: the tokens of the leading messages that are byte-identical to the
  previous request's (tool schemas count when they are identical too), over the tokens of
  the current request;
- cache-adjusted cost: stable prefix tokens at ``cache_ratio``, the rest at 1.0.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from typing import Any

from context_engine.proxy.engine.tokens import TokenCounter

Messages = list[dict[str, Any]]
SEPARATOR = "\x00"
LENGTH_BUCKETS = (20, 100, 300)  # request lengths in messages: ≤20, ≤100, ≤300, >300
# Structural values no probe should be answered from (a call id like "call_001" is not
# evidence of the number 001).
STRUCTURAL_KEYS = frozenset({"role", "tool_call_id", "id", "type"})


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            if k not in STRUCTURAL_KEYS:
                yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def decoded_arguments(message: dict[str, Any]) -> Iterator[str]:
    """Every string inside a message's tool-call arguments (JSON decoded)."""
    for call in message.get("tool_calls") or ():
        args = (call.get("function") or {}).get("arguments") if isinstance(call, dict) else None
        if isinstance(args, str):
            try:
                yield from _strings(json.loads(args))
            except ValueError:
                continue


def visible_text(messages: Messages) -> str:
    """All text of a request a model reads, joined by a separator no evidence holds."""
    parts: list[str] = []
    for m in messages:
        parts.extend(_strings(m))
        parts.extend(decoded_arguments(m))
    return SEPARATOR.join(parts)


def probe_retained(evidence: Sequence[str], text: str) -> bool:
    """Whether every evidence substring is still visible (probes without evidence: skip them)."""
    return all(e in text for e in evidence)


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def median(values: Sequence[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def length_bucket(n_messages: int) -> str:
    low = 1
    for high in LENGTH_BUCKETS:
        if n_messages <= high:
            return f"{low}-{high}"
        low = high + 1
    return f">{LENGTH_BUCKETS[-1]}"


def same_message(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Byte-identical as a client serializes it (key order included)."""
    if a is b:
        return True
    return json.dumps(a, ensure_ascii=False) == json.dumps(b, ensure_ascii=False)


def common_prefix_len(prev: Messages, cur: Messages) -> int:
    n = 0
    for a, b in zip(prev, cur):
        if not same_message(a, b):
            break
        n += 1
    return n


def stable_prefix_tokens(
    counter: TokenCounter,
    prev: Messages | None,
    cur: Messages,
    prev_tools: list[dict[str, Any]] | None = None,
    cur_tools: list[dict[str, Any]] | None = None,
) -> tuple[int, bool]:
    """Tokens of ``cur`` a prompt cache could serve from ``prev``, and whether all of
    ``prev`` is a prefix of ``cur``. The first request of a sequence has nothing cached."""
    if prev is None:
        return 0, False
    if prev_tools != cur_tools:
        return 0, False
    n = common_prefix_len(prev, cur)
    tokens = counter.tools(cur_tools) + sum(counter.message(m) for m in cur[:n])
    return tokens, n == len(prev)


def cache_cost(stable: int, total: int, cache_ratio: float) -> float:
    """Input cost of one request in full-price tokens."""
    return stable * cache_ratio + (total - stable)


def ratio(part: float, whole: float) -> float | None:
    return part / whole if whole else None
