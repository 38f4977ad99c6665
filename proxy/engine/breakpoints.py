"""Cache breakpoints survive rewrites (Chat Completions today).

A *block* is a content part of a message whose content is a list, or a whole message
whose content is a string (a marker then sits on the message). After the rules ran:

- a client's ``cache_control`` on a block the rules kept stays on it;
- one on a tool result a rule rewrote in place (the same ``tool_call_id`` at the same
  place, its content compacted or folded) stays on that result's last block: the
  prefix up to it is what the client asked the provider to cache, and a marker moved
  back would leave the newest result uncached once and written on the next turn;
- one on a block a rule replaced or dropped moves to the nearest kept block before it
  (lost only if no block before it was kept);
- markers the rules carried elsewhere are removed: there are never more than the
  client set (so never more than 4 when the client kept the limit) and none is added
  where the client had none. Tool definitions are never touched.

``mark_stable`` (compact's ``mark_stable``): where a rule reports the end of the prefix
no later rewrite of the session changes (``RequestContext.stable_end``) and the client
set 1-3 markers, one more goes on that message's last block, with the value of the
client's next marker after it (so a longer ``ttl`` never follows a shorter one): a later
epoch then re-writes only what it changed, not everything after the system prompt.

A message is *kept* when the rewrite holds an equal message (markers aside), matched in
order. ``auto_breakpoints`` (off by default): where the client set no marker at all,
one goes on the last system message and one on the last message of the closed blocks
(the stable prefix the rules produce; ``context_engine.proxy.engine.messages.closed_prefix_end``,
laid out as the rule offering ``ClosedBlocks`` says, else ``AUTO_BLOCKS``).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Any

from context_engine.proxy.engine.messages import closed_prefix_end, is_instruction
from context_engine.proxy.engine.prefix import (
    MARK,
    MAX_BREAKPOINTS,
    digest,
    has_mark,
    mark_count,
    turn_key,
)

AUTO_MARK = {"type": "ephemeral"}
AUTO_BLOCKS = (4, 4)  # (window, block) of the closed blocks when no rule offers ``ClosedBlocks``
Spot = tuple[int, int]  # (message index, part index; -1 = the message itself;
#                         -2 = string content turned into one marked text part)


@dataclass
class Moves:
    kept: int = 0
    moved: int = 0
    lost: int = 0
    added: int = 0


def _marks(m: dict[str, Any]) -> list[tuple[int, Any]]:
    out = [(-1, m[MARK])] if MARK in m else []
    content = m.get("content")
    if isinstance(content, list):
        out += [(j, p[MARK]) for j, p in enumerate(content) if isinstance(p, dict) and MARK in p]
    return out


def kept_positions(original: list[Any], rewritten: list[Any]) -> list[int | None]:
    """For each original message, the index of the same message in the rewrite (in order)."""
    where: dict[bytes, list[int]] = {}
    for k, m in enumerate(rewritten):
        where.setdefault(digest(m), []).append(k)
    out: list[int | None] = []
    floor = -1
    for m in original:
        found = None
        places = where.get(digest(m), [])
        at = bisect_right(places, floor)  # the first place after the last one matched
        if at < len(places):
            found = floor = places[at]
        out.append(found)
    return out


def in_place(original: list[Any], rewritten: list[Any], pos: list[int | None]) -> list[int | None]:
    """For each original tool result that is not kept verbatim, the index of the rewrite's
    tool result with the same ``tool_call_id``, in order between the kept messages."""
    taken = {k for k in pos if k is not None}
    ids: dict[Any, int] = {}
    for j, m in enumerate(rewritten):
        if isinstance(m, dict) and m.get("role") == "tool" and j not in taken:
            ids.setdefault(m.get("tool_call_id"), j)
    out: list[int | None] = []
    floor = -1
    nxt = [len(rewritten)] * (len(pos) + 1)  # the next kept position after each message
    for i in range(len(pos) - 1, -1, -1):
        at = pos[i]
        nxt[i] = at if at is not None else nxt[i + 1]
    for i, m in enumerate(original):
        k: int | None = None
        at = pos[i]
        if at is not None:
            floor = at
        elif isinstance(m, dict) and m.get("role") == "tool" and m.get("tool_call_id") is not None:
            k = ids.get(m.get("tool_call_id"))
            if k is None or not floor < k < nxt[i + 1]:
                k = None
            else:
                floor = k
        out.append(k)
    return out


def _last_spot(k: int, m: dict[str, Any], as_part: bool = False) -> Spot:
    """The last block of message ``k``; a part marker moved onto string content makes it
    one text part (providers render both the same)."""
    content = m.get("content")
    if isinstance(content, list) and content:
        return (k, len(content) - 1)
    return (k, -2) if as_part and isinstance(content, str) else (k, -1)


def targets(original: list[Any], rewritten: list[Any]) -> tuple[dict[Spot, Any], Moves]:
    """Where each of the client's markers goes in the rewrite, and what moved."""
    pos = kept_positions(original, rewritten)
    redone = in_place(original, rewritten, pos)
    want: dict[Spot, Any] = {}
    whole: set[int] = set()  # messages that hold a whole-message marker in ``want``
    moves = Moves()
    last: int | None = None

    def put(spot: Spot, value: Any) -> None:
        if spot[0] not in whole or spot[1] >= 0:
            want.setdefault(spot, value)
            if spot[1] < 0:
                whole.add(spot[0])

    for i, m in enumerate(original):
        k = pos[i]
        marks = _marks(m) if isinstance(m, dict) else []
        if k is not None:
            for j, value in marks:
                want.setdefault((k, j), value)
                if j < 0:
                    whole.add(k)
                moves.kept += 1
            last = k
            continue
        here = redone[i]
        if here is not None:
            last = here
            for j, value in marks:
                moves.kept += 1
                put(_last_spot(here, rewritten[here], as_part=j >= 0), value)
            continue
        for j, value in marks:
            if last is None:
                moves.lost += 1
                continue
            moves.moved += 1
            put(_last_spot(last, rewritten[last], as_part=j >= 0), value)
    return want, moves


def _place(m: dict[str, Any], spots: dict[int, Any]) -> dict[str, Any]:
    """``m`` with markers exactly at ``spots`` (part index → value; -1 = the message)."""
    out = {k: v for k, v in m.items() if k != MARK}
    content = m.get("content")
    if -2 in spots and isinstance(content, str):
        out["content"] = [{"type": "text", "text": content, MARK: spots[-2]}]
    elif isinstance(content, list):
        out["content"] = [({kk: vv for kk, vv in p.items() if kk != MARK} | ({MARK: spots[j]} if j in spots else {}))
                          if isinstance(p, dict) else p for j, p in enumerate(content)]
    if -1 in spots:
        out[MARK] = spots[-1]
    return out


def _spots_of(m: dict[str, Any]) -> dict[int, Any]:
    return dict(_marks(m))


def restore(original: list[Any], rewritten: list[Any], auto: bool = False,
            window: int = AUTO_BLOCKS[0], block: int = AUTO_BLOCKS[1]) -> tuple[list[Any], Moves]:
    """The rewrite with the client's markers placed by the rules above (the same list
    object when nothing needs to change)."""
    if rewritten is original:
        return rewritten, Moves()
    client = any(has_mark(m) for m in original)
    if not client:
        if not auto:
            return rewritten, Moves()
        want = _auto(rewritten, window, block)
        moves = Moves(added=len(want))
    else:
        want, moves = targets(original, rewritten)
    per_msg: dict[int, dict[int, Any]] = {}
    for (k, j), value in want.items():
        per_msg.setdefault(k, {})[j] = value
    out = list(rewritten)
    changed = False
    for k, m in enumerate(rewritten):
        if not isinstance(m, dict):
            continue
        spots = per_msg.get(k, {})
        if spots == _spots_of(m):
            continue
        out[k] = _place(m, spots)
        changed = True
    return (out if changed else rewritten), moves


def mark_stable(messages: list[Any], end: tuple[int, bytes]) -> list[Any]:
    """``messages`` with a marker on the message whose digest or turn key (``turn_key``:
    a rule after ``compact`` may have folded its text) is ``end[1]`` (at index ``end[0]``,
    else the last such), or the nearest one before it that can carry one as every API
    writes it (a tool result, or text); the same list when that one already has a marker,
    none matches, or the messages hold none or four already (the tools' the caller
    counts: ``compact`` asks for a marker only below four in all)."""
    marked = [k for k, m in enumerate(messages) if has_mark(m)]
    if not marked or mark_count(messages) >= MAX_BREAKPOINTS:
        return messages
    hint, want = end

    def named(m: Any) -> bool:
        return isinstance(m, dict) and (digest(m) == want or turn_key(m) == want)

    at = hint if 0 <= hint < len(messages) and named(messages[hint]) else next(
        (k for k in range(len(messages) - 1, -1, -1) if named(messages[k])), None)
    while at is not None and at >= 0 and not _markable(messages[at]):
        at -= 1
    if at is None or at < 0 or at in marked:
        return messages
    after = [k for k in marked if k > at] or marked[::-1]
    value = _marks(messages[after[0]])[-1][1]
    m = messages[at]
    spot = _last_spot(at, m, as_part=m.get("role") != "tool")  # a tool result's sits on it
    out = list(messages)
    out[at] = _place(m, {**_spots_of(m), spot[1]: value})
    return out


def _markable(m: Any) -> bool:
    if not isinstance(m, dict):
        return False
    content = m.get("content")
    return m.get("role") == "tool" or isinstance(content, str) or (
        isinstance(content, list) and bool(content)
        and all(isinstance(p, dict) and p.get("type") == "text" for p in content))


def _auto(messages: list[Any], window: int, block: int) -> dict[Spot, Any]:
    want: dict[Spot, Any] = {}
    systems = [k for k, m in enumerate(messages) if is_instruction(m)]
    if systems:
        want[_last_spot(systems[-1], messages[systems[-1]], True)] = dict(AUTO_MARK)
    end = closed_prefix_end(messages, window, block)
    if end > (systems[-1] + 1 if systems else 0):
        want[_last_spot(end - 1, messages[end - 1], True)] = dict(AUTO_MARK)
    return want
