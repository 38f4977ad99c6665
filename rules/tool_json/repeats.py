"""Restated results as field diffs (``tool_json``'s ``diff_repeats``).

Agents fetch a record, change it, and the change returns the whole record again
(tau-bench: ``update_reservation_flights`` and ``cancel_reservation`` answer with the
reservation ``get_reservation_details`` showed a few turns earlier). A JSON object result
whose first field (its identity, e.g. ``reservation_id: HATHAU``) equals the first field
of an earlier object result in the request is sent as the fields that differ from the
latest such result, after one line naming it::

    [changed fields of the result of tool call call_1 above (reservation_id: HATHAU); every other field is as there; no longer there: insurance]
    status: cancelled

Nothing is lost while the earlier result is in the request (``fold_duplicates`` refers
back the same way); the reference depends only on earlier messages, which the client
resends unchanged, so the result's text is fixed when it arrives and the prefix stays
stable. Values are compared after ``prune`` (what the compact text shows).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from typing import Any

from context_engine.proxy.store.memo import BoundedCache
from context_engine.rules.tool_json.compact import CompactOptions, parse_container, prune, render

DIFF_REF = "[changed fields of the result of tool call {id} above ({key}: {value}); every other " \
           "field is as there{gone}]"
SAME_REF = "[the same fields as the result of tool call {id} above ({key}: {value})]"
Identity = tuple[str, str]


class Repeats:
    """The object results of one request shown in full so far, by identity (the latest
    of each); diffs against them."""

    def __init__(self, memo: BoundedCache[bytes, Any], opts: CompactOptions) -> None:
        self._memo = memo
        self._opts = opts
        self._latest: dict[Identity, tuple[str, dict[str, Any]]] = {}

    def pruned(self, text: str) -> dict[str, Any] | None:
        """The pruned object ``text`` holds, else None (remembered by content)."""
        key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        found = self._memo.get(key, _MISSING)
        if found is _MISSING:
            found = _parse_object(text, self._opts)
            self._memo.put(key, found, held_bytes(found))
        return found if isinstance(found, dict) else None

    def diff(self, text: str) -> str | None:
        """This result as its fields that differ from the latest earlier result shown in
        full with its identity; None when there is none."""
        value = self.pruned(text)
        ident = identity(value) if value is not None else None
        earlier = self._latest.get(ident) if ident is not None else None
        if value is None or ident is None or earlier is None:
            return None
        ref_id, ref = earlier
        changed = {k: v for k, v in value.items() if k not in ref or not _same(ref[k], v)}
        gone = [k for k in ref if k not in value]
        if not changed and not gone:
            return SAME_REF.format(id=ref_id, key=ident[0], value=ident[1])
        head = DIFF_REF.format(id=ref_id, key=ident[0], value=ident[1],
                               gone="; no longer there: " + ", ".join(gone) if gone else "")
        opts = dataclasses.replace(self._opts, ascii_only=text.isascii())
        return head + ("\n" + render(changed, opts) if changed else "")

    def shown(self, call_id: str, text: str) -> None:
        """Record a result sent in full (every field it holds, compacted or as it came):
        later results with its identity refer to it. Cut results and diffs are not
        recorded; a diff always refers to a result shown in full."""
        value = self.pruned(text)
        ident = identity(value) if value is not None else None
        if ident is not None and value is not None and call_id:
            self._latest[ident] = (call_id, value)


def identity(value: dict[str, Any]) -> Identity | None:
    """The first field when it is a string or integer naming the record (no line break)."""
    if not value:
        return None
    key, first = next(iter(value.items()))
    if isinstance(first, bool) or not isinstance(first, (str, int)):
        return None
    shown = str(first)
    if not shown or "\n" in shown or "\n" in key or len(shown) > 80:
        return None
    return key, shown


def held_bytes(value: Any) -> int:
    """Bytes a parsed JSON value holds: every container and scalar in it (a parsed
    object takes several times its text)."""
    total, stack = 0, [value]
    while stack:
        v = stack.pop()
        total += sys.getsizeof(v)
        if isinstance(v, dict):
            stack += v.keys()
            stack += v.values()
        elif isinstance(v, list):
            stack += v
    return total


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=False) == json.dumps(b, sort_keys=False)


def _parse_object(text: str, opts: CompactOptions) -> dict[str, Any] | None:
    value = parse_container(text)
    pruned = prune(value, opts) if isinstance(value, dict) else None
    return pruned if isinstance(pruned, dict) and pruned else None


_MISSING: Any = object()
