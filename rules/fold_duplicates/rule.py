"""fold_duplicates: turns that carry no new information leave the request.

What it does
    - Repeated tool results (same tool, same arguments, same output) become a one-line
      reference to the first copy: ``[same result as tool call call_1 above]``.
    - Repeated user/assistant messages (equal after casefolding, collapsing whitespace and
      stripping decorative punctuation; optionally near repeats, see ``near_jaccard``) become
      ``[repeats the earlier user message “first words…”]``.
    - Filler acknowledgements ("ok", "thanks", "got it", "嗯", "好的", "稍等"…) are dropped.
      A user "ok" that answers an assistant question is kept: it may be consent.
    - Superseded configuration changes: "make the theme red" then "no, blue" keeps one
      message, "make the theme blue". Only consecutive user messages about the same key,
      with no tool call between them. A change of the object acted on ("switch from
      Baidu to Bing", then "from Bing to Google") is never folded. The system prompt and
      the last user turn are never touched.

Why
    Agents resend the whole history on every call: each repeat and "ok" is billed again.

Cache alignment
    Tool results and assistant messages are folded forward: the first copy stays and
    later copies fold when they arrive, so a sent message never changes. Decisions that
    depend on later turns (an ack that left the window, a superseded value, a repeated
    user message, which is the protected last user turn when it arrives) are taken only
    in closed blocks (``context_engine.proxy.engine.messages.closed_prefix_end`` alignment), so the prefix changes
    only at block boundaries. Units this rule may drop (acks, config changes) are not
    counted for blocks, so applying the rule twice changes nothing more. In an agent
    session (``proxy/engine/sessions.py``) a fold is taken when its message arrives or
    never: between ``compact``'s epochs the cached prefix must not change, and on
    Anthropic a change deep in the request re-writes it from the last breakpoint before
    it. So there a repeated user message (a harness's observation, its "EXACTLY ONE
    action" reminder) stays whole, and acks and config changes stay.

Example (before → after)
    user: make the theme red · assistant: Done. · user: no, blue · user: thanks · … →
    assistant: Done. · user: make the theme blue · …

Options
    See ``FoldDuplicatesConfig`` (``context-engine rules`` prints them).

Risks
    A superseded value can hide a difference the agent needed: config folds need an
    explicit, single-valued "set the X to Y" with the same X. Near repeats are off by
    default (a file view whose cursor moved reads as a near repeat). Dropped acks lose
    tone, not facts.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from context_engine.proxy.engine.context import RequestContext
from context_engine.proxy.engine.contract import RuleDeps
from context_engine.proxy.engine.messages import (
    REPEAT_REF,
    call_index,
    closed_block_count,
    keep_users_apart,
    last_user_index,
    system_prefix_len,
    text_of,
    units,
)
from context_engine.proxy.engine.sessions import AGENT, pinned
from context_engine.proxy.engine.tokens import TokenCounter
from context_engine.rules.fold_duplicates import patterns as fp
from context_engine.rules.fold_duplicates.config import FoldDuplicatesConfig
from context_engine.rules.text_parts import on_plain

TOOL_REF = "[same result as tool call {id} above]"
TEXT_REF = REPEAT_REF + "{role} message “{head}…”]"
_REF_PREFIXES = ("[same result as tool call ", REPEAT_REF)


@dataclass
class _Work:
    """One request's fold plan: ``out[i]`` is message i as it will be sent, None = dropped."""

    msgs: list[Any]
    out: list[Any]
    head: int
    last_user: int
    closed_end: int
    counter: TokenCounter
    counts: Counter[str]
    pins: frozenset[int] = frozenset()  # pinned user messages (the task; agents' instructions)
    agent: bool = False  # an agent session: only folds taken on arrival (module docstring)


class FoldDuplicates:
    name = "fold_duplicates"
    Config = FoldDuplicatesConfig
    lossless = {"acks": False, "superseded": False, "near_jaccard": 0.0}  # repeats only (Lossless)

    def __init__(self, config: FoldDuplicatesConfig, deps: RuleDeps) -> None:
        self.config = config
        self.deps = deps

    async def apply(self, ctx: RequestContext) -> RequestContext:
        return await on_plain(ctx, self._apply)  # a message sent as one text part is read as its string

    async def _apply(self, ctx: RequestContext) -> RequestContext:
        msgs = list(ctx.messages)
        head = system_prefix_len(msgs)
        w = _Work(msgs, list(msgs), head, last_user_index(msgs), self._closed_end(msgs, head),
                  TokenCounter(ctx.encoding), Counter(),
                  frozenset(pinned(msgs, ctx.kind == AGENT)), ctx.kind == AGENT)
        if self.config.acks and not w.agent:
            self._fold_acks(w)
        if self.config.superseded and not w.agent:
            self._fold_superseded(w)
        self._fold_repeats(w)
        w.counts["acks"] -= keep_users_apart(w.msgs, w.out)  # an ack between users stays
        w.counts = +w.counts
        if not w.counts:
            return ctx
        new = [m for m in w.out if m is not None]
        note = {**dict(sorted(w.counts.items())), "closed_end": w.closed_end}
        return ctx.replace(messages=new).with_note(self.name, note)

    def _removable(self, m: Any) -> bool:
        """A message this rule may drop (counted out of blocks, so drops never shift them)."""
        text = m.get("content")
        if m.get("role") not in ("user", "assistant") or m.get("tool_calls"):
            return False
        if not isinstance(text, str):
            return False
        if self.config.acks and fp.is_ack(text, self.config.max_ack_chars):
            return True
        return (self.config.superseded and m.get("role") == "user"
                and fp.parse_config_change(text) is not None)

    def _closed_end(self, msgs: list[Any], head: int) -> int:
        c = self.config
        spans = [s for s in units(msgs, head)
                 if not (s[1] - s[0] == 1 and self._removable(msgs[s[0]]))]
        closed = closed_block_count(len(spans), c.recent_turns, c.block_turns) * c.block_turns
        return spans[closed - 1][1] if closed else head

    def _fold_acks(self, w: _Work) -> None:
        for i in range(w.head, w.closed_end):
            m = w.msgs[i]
            text = m.get("content")
            if i == w.last_user or i in w.pins or m.get("role") not in ("user", "assistant"):
                continue
            if not isinstance(text, str) or not fp.is_ack(text, self.config.max_ack_chars):
                continue
            if m["role"] == "user" and _after_question(w.msgs, i):
                continue
            w.out[i] = {**m, "content": None} if m.get("tool_calls") else None
            w.counts["acks"] += 1

    # --- superseded configuration changes ------------------------------------------------

    def _fold_superseded(self, w: _Work) -> None:
        prev: tuple[int, fp.ConfigChange] | None = None
        for i in range(w.head, w.closed_end):
            m = w.out[i]
            if m is None:
                continue
            if m.get("role") == "tool" or m.get("tool_calls"):
                prev = None
                continue
            if m.get("role") != "user":
                continue
            text = m.get("content")
            change = fp.parse_config_change(text) if isinstance(text, str) else None
            if change is None or i == w.last_user or i in w.pins:
                prev = None
                continue
            prev = self._supersede(w, prev, i, change)

    def _supersede(self, w: _Work, prev: tuple[int, fp.ConfigChange] | None, i: int,
                   change: fp.ConfigChange) -> tuple[int, fp.ConfigChange] | None:
        """Fold ``prev`` into message i when i changes the same setting; the new ``prev``."""
        if prev is None:
            return (i, change) if change.key else None
        j, before = prev
        bare = not change.key
        eff = (fp.ConfigChange(before.key, before.before, change.value, before.after)
               if bare else change)
        if eff.key != before.key:
            return (i, change)
        new = {**w.out[i], "content": eff.with_value(change.value)} if bare else w.out[i]
        saved = (w.counter.message(w.out[j]) + w.counter.message(w.out[i])
                 - w.counter.message(new))
        if saved <= 0:
            return (i, eff)
        w.out[j], w.out[i] = None, new
        w.counts["superseded"] += 1
        return (i, eff)

    # --- repeats -------------------------------------------------------------------------

    def _fold_repeats(self, w: _Work) -> None:
        calls = _call_index(w.msgs)
        tools: dict[Any, str] = {}
        texts: dict[tuple[str, str], str] = {}
        near: dict[str, list[tuple[frozenset[str], tuple[str, ...], str]]] = {}
        for i in range(w.head, len(w.msgs)):
            m = w.out[i]
            if m is None or m is not w.msgs[i]:
                continue
            if m.get("role") == "tool":
                self._tool_repeat(w, i, calls, tools)
            elif m.get("role") in ("user", "assistant"):
                self._text_repeat(w, i, texts, near.setdefault(m["role"], []))

    def _eligible(self, w: _Work, i: int) -> bool:
        if w.msgs[i].get("role") == "user":
            return i < w.closed_end and i != w.last_user and i not in w.pins and not w.agent
        return self.config.repeats_in_window or (i < w.closed_end and not w.agent)

    def _tool_repeat(self, w: _Work, i: int, calls: dict[str, tuple[str, str]],
                     seen: dict[Any, str]) -> None:
        m = w.msgs[i]
        content, call_id = m.get("content"), str(m.get("tool_call_id", ""))
        if not isinstance(content, str) or content.startswith(_REF_PREFIXES):
            return
        key: Any = content if self.config.tool_match == "output" else (
            *calls.get(call_id, ("", "")), content)
        first = seen.setdefault(key, call_id)
        if first != call_id and self._eligible(w, i):
            self._fold_to(w, i, TOOL_REF.format(id=first), "tool_repeats")

    def _text_repeat(self, w: _Work, i: int, seen: dict[tuple[str, str], str],
                     near: list[tuple[frozenset[str], tuple[str, ...], str]]) -> None:
        m = w.msgs[i]
        text = m.get("content")
        if not isinstance(text, str) or not text.strip() or text.startswith(_REF_PREFIXES):
            return
        if fp.is_ack(text, self.config.max_ack_chars) or fp.parse_config_change(text) is not None:
            return
        norm = fp.normalize(text)
        first = seen.get((m["role"], norm))
        near_on = 0 < self.config.near_jaccard <= 1 and self.config.near_lookback > 0
        sh, words = (fp.shingles(norm), tuple(norm.split(" "))) if near_on else (frozenset(), ())
        if first is None and near_on:
            first = self._near_first(sh, words, near)
        if first is not None and self._eligible(w, i):
            ref = TEXT_REF.format(role=m["role"], head=fp.head_words(first))
            self._fold_to(w, i, ref, "repeats")
            return
        if first is None:
            seen[(m["role"], norm)] = text
            near.append((sh, words, text))

    def _near_first(self, sh: frozenset[str], words: tuple[str, ...],
                    near: list[tuple[frozenset[str], tuple[str, ...], str]]) -> str | None:
        for c_sh, c_words, c_text in reversed(near[-self.config.near_lookback:]):
            if (fp.jaccard(sh, c_sh) >= self.config.near_jaccard
                    and fp.in_order_subset(words, c_words)):
                return c_text
        return None

    def _fold_to(self, w: _Work, i: int, ref: str, kind: str) -> None:
        m = w.msgs[i]
        if w.counter.text(ref) + self.config.min_saving > w.counter.text(text_of(m)):
            return
        w.out[i] = {**m, "content": ref}
        w.counts[kind] += 1


def _after_question(msgs: list[Any], i: int) -> bool:
    """True when the nearest earlier non-tool message is an assistant question."""
    for j in range(i - 1, -1, -1):
        if msgs[j].get("role") != "tool":
            return msgs[j].get("role") == "assistant" and fp.asks_question(text_of(msgs[j]))
    return False


def _call_index(msgs: list[Any]) -> dict[str, tuple[str, str]]:
    """tool_call id → (tool name, arguments with JSON keys sorted)."""
    return {cid: (name, _canon(args)) for cid, (name, args) in call_index(msgs).items()}


def _canon(arguments: Any) -> str:
    try:
        return json.dumps(json.loads(arguments), sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return str(arguments)
