"""compact: compaction epochs for agent sessions.

What it does
    In an agent session (``proxy/engine/sessions.py``) old tool results, a harness's
    observations and (``prose``) the text of old assistant turns are cleared in rare
    steps, the epochs. Each cleared item becomes an in-place placeholder naming its own
    ``orig:`` id, which ``context_recall`` redeems::

        [context-engine:cleared] 57 lines of tool output; original: orig:1a2b3c4d5e6f

    The last ``keep_recent`` results and ``keep_prose`` assistant texts stay whole, and
    so do the results on a file the agent's last ``keep_related`` turns name
    (``related.py``); a cleared turn's tool inputs longer than ``input_chars`` keep their
    first line and their own ``orig:`` id (``inputs.py``). System and developer
    messages, the task and every instruction are pinned. Between
    epochs nothing changes: each request is the one before plus what the client
    appended, so the provider's cached prefix keeps hitting.

When
    An epoch fires when the request as it would be sent holds ``trigger_tokens`` (or
    ``trigger_share`` of the model's window) and clearing pays (``planner.py``): the
    cleared tokens at the cached price over the session's expected remaining requests
    beat the one-time miss (the new prefix uncached, plus the write premium), and it
    clears at least ``clear_at_least``. A session idle past ``cache_ttl`` has lost its
    cached prefix anyway: its next request compacts at no miss cost.

Example
    [system, task, (call ls, result: 40 lines), …, (call grep, result: 12 lines), …]
    → at an epoch: [system, task, (call ls, "[context-engine:cleared] orig:1a2b… :
    src/app.py:88 | …"), …, (call grep, result whole: one of the last keep_recent)]

Breakpoints
    Where the client set 1-3 cache breakpoints (Anthropic), ``mark_stable`` reports the
    end of the prefix no later epoch changes (``RequestContext.stable_end``) and the
    engine marks it (``proxy/engine/breakpoints.py``): an epoch then misses only from
    what it changed, not from the system prompt on.

Determinism
    What every epoch cleared is committed to the store (``epochs.py``); the rewrite is a
    function of the request and that state, so replicas and restarts send the same bytes.

Why
    In long agent sessions old tool output is most of the bill, re-read on every turn.
    Clearing it on every request (a sliding window) breaks the cached prefix each time
    and costs more than it saves; clearing in paid-for epochs does not.

Options
    See ``CompactConfig``.

Risks
    A cleared result the agent needs again costs it a ``context_recall`` call (or, for a
    client without tools, a re-run of the command). Run it first: the lossless rules
    then never refer to a result it cleared.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import Any, cast

from context_engine.proxy.engine.context import RequestContext
from context_engine.proxy.engine.contract import RuleDeps
from context_engine.proxy.engine.messages import (
    fingerprint,
    last_user_index,
    system_prefix_len,
    text_of,
)
from context_engine.proxy.engine.originals import keep_original
from context_engine.proxy.engine.prefix import MAX_BREAKPOINTS, mark_count, turn_key
from context_engine.proxy.engine.sessions import AGENT, observations, pinned
from context_engine.proxy.engine.tokens import TokenCounter
from context_engine.proxy.store.memo import BoundedCache
from context_engine.rules.compact.config import SESSIONS, CompactConfig
from context_engine.rules.compact.epochs import Epoch, Line, commit, load, message_hash
from context_engine.rules.compact.inputs import shorten_call
from context_engine.rules.compact.placeholder import CLEARED, placeholder
from context_engine.rules.compact.planner import Prices, expected_requests, plan, trigger
from context_engine.rules.compact.related import related
from context_engine.rules.compact.way_back import reread_rate, worth_clearing
from context_engine.rules.text_parts import on_plain


class Compact:
    name = "compact"
    Config = CompactConfig

    def __init__(self, config: CompactConfig, deps: RuleDeps,
                 clock: Callable[[], float] = time.time) -> None:
        if config.sessions not in SESSIONS:
            raise ValueError(f"sessions: {config.sessions!r} is not one of {', '.join(SESSIONS)}")
        self.config = config
        self.deps = deps
        self.clock = clock
        self._placeholders: BoundedCache[bytes, str | None] = BoundedCache(8192, 16 * 1024 * 1024)

    def _candidates(self, original: list[Any], cleared: dict[int, str], agent: bool,
                    seen: frozenset[int], counter: TokenCounter, acts: bool) -> list[int]:
        """Client indices an epoch would clear now, in order (``seen``: observations)."""
        pins = set(pinned(original, agent)) | {last_user_index(original)}
        results = [i for i, m in enumerate(original) if isinstance(m, dict)
                   and (m.get("role") == "tool" or i in seen)]
        prose = [i for i, m in enumerate(original) if isinstance(m, dict)
                 and m.get("role") == "assistant"] if self.config.prose or self.config.input_chars else []
        keep = set(results[len(results) - self.config.keep_recent:] if self.config.keep_recent else [])
        keep |= set(prose[len(prose) - self.config.keep_prose:] if self.config.keep_prose else [])
        keep |= related(original, results, self.config.keep_related)
        return [i for i in sorted(set(results) | set(prose))
                if i not in keep and i not in pins and i not in cleared
                and self._clear(original[i], counter, acts) is not None]

    def _clear(self, m: dict[str, Any], counter: TokenCounter,
               acts: bool) -> tuple[dict[str, Any], list[str]] | None:
        """The fields of ``m`` clearing replaces (a function of its content) and the tool
        inputs it shortened, or None when there is nothing worth clearing: its text, if at least
        ``min_item_tokens`` and longer than its placeholder (an assistant's only with
        ``prose``; ``acts``: a text-action agent's, whose placeholder keeps its fenced
        commands), and an assistant's long tool inputs (``inputs.py``)."""
        out: dict[str, Any] = {}
        content = m.get("content")
        assistant = m.get("role") == "assistant"
        if isinstance(content, str) and not content.startswith(CLEARED) and (self.config.prose or not assistant):
            tokens = counter.text(content)
            text = self._placeholder(m, content, assistant, acts)
            # a placeholder listing identifiers must at least halve the result, else it stays
            share = 2 if self.config.identifiers and not assistant else 1
            if text is not None and tokens >= self.config.min_item_tokens \
                    and tokens > share * counter.text(text):
                out["content"] = text
        values: list[str] = []
        if assistant and isinstance(m.get("tool_calls"), list):
            calls = [shorten_call(c, self.config.input_chars, CLEARED) for c in m["tool_calls"]]
            values = [v for _, vs in calls for v in vs]
            if values:
                out["tool_calls"] = [c for c, _ in calls]
        return (out, values) if out else None

    def _placeholder(self, m: dict[str, Any], content: str, assistant: bool, acts: bool) -> str | None:
        """``placeholder(m)``, remembered by content: clients resend every old result on
        every request, and listing a result's identifiers parses it."""
        key = hashlib.blake2b(f"{assistant:d}{acts:d}".encode() + content.encode("utf-8", "surrogatepass"),
                              digest_size=16).digest()
        found = self._placeholders.get(key, _MISSING)
        if found is _MISSING:
            found = placeholder(m, self.config.gist_chars, self.config.input_chars if acts else 0,
                                self.config.identifiers and not assistant)
            self._placeholders.put(key, found)
        return cast("str | None", found)

    def _clearable(self, original: list[Any], seen: frozenset[int], counter: TokenCounter) -> int:
        """Tokens of the messages an epoch may ever clear (results, and prose when on)."""
        return sum(counter.text(m["content"]) for i, m in enumerate(original)
                   if isinstance(m, dict) and isinstance(m.get("content"), str)
                   and (m.get("role") == "tool" or i in seen
                        or (self.config.prose and m.get("role") == "assistant")))

    def _cleared(self, msgs: list[Any], original: list[Any], ids: dict[int, str],
                 counter: TokenCounter, acts: bool) -> list[Any]:
        """``msgs`` with the messages of client indices ``ids`` replaced in place."""
        if not ids:
            return msgs
        pos = {id(m): j for j, m in enumerate(msgs)}
        out = list(msgs)
        for i in ids:
            j = pos.get(id(original[i]))
            done = self._clear(original[i], counter, acts) if j is not None else None
            if j is not None and done is not None:
                out[j] = {**out[j], **done[0]}
        return out

    async def apply(self, ctx: RequestContext) -> RequestContext:
        return await on_plain(ctx, self._apply)  # a result sent as one text part is read as its string

    async def _apply(self, ctx: RequestContext) -> RequestContext:
        agent = ctx.kind == AGENT
        if self.config.sessions == "agent" and not agent:
            return ctx
        original: list[Any] = list(ctx.original if ctx.original is not None else ctx.messages)
        session = ctx.session_id or fingerprint(original[:2])
        store = self.deps.store
        committed = load(store, session)
        now = self.clock()
        line = committed if committed is not None and committed.holds(original) else Line()
        last_seen = committed.seen if committed is not None else 0.0
        cold = self.config.cache_ttl > 0 and last_seen > 0 and now - last_seen > self.config.cache_ttl
        counter = TokenCounter(ctx.encoding)
        prices = Prices.of(ctx.model, self.config)
        # a text-action harness (no tool results): a cleared turn keeps its fenced commands
        acts = not any(isinstance(m, dict) and m.get("role") == "tool" for m in original)
        current = self._cleared(list(ctx.messages), original, line.cleared, counter, acts)
        marked = self._marks_stable(ctx)
        stable = self._stable_end(original, line.cleared, agent, counter, acts) if marked else None
        epoch = self._epoch(ctx, original, line, current, counter, prices, cold, marked, acts)
        line.seen = now
        fired = epoch is not None
        if epoch is not None and not commit(store, session, line):
            line.cleared = {i: h for i, h in line.cleared.items() if i not in epoch[0]}
            line.epochs.pop()
            fired = False
        elif epoch is not None:
            for i in epoch[0]:  # the way back: context_recall finds it by its id
                fields, inputs = self._clear(original[i], counter, acts) or ({}, [])
                for text in ([text_of(original[i])] if "content" in fields else []) + inputs:
                    keep_original(store, text, scope=ctx.caller)
            current = epoch[1]
        else:
            commit(store, session, line)
        figures = line.figures(fired, agent, prices.assumed)
        if not line.cleared:
            return ctx.replace(compaction=figures)
        at = None if stable is None else stable if stable < len(ctx.messages) and ctx.messages[stable] is original[stable] \
            else next((j for j, m in enumerate(ctx.messages) if m is original[stable]), None)
        return ctx.replace(messages=current, compaction=figures,
                           stable_end=(at, turn_key(current[at])) if at is not None else None).with_note(
            self.name, {"epoch": line.epoch, "cleared": len(line.cleared), "fired": fired})

    def _epoch(self, ctx: RequestContext, original: list[Any], line: Line, current: list[Any],
               counter: TokenCounter, prices: Prices, cold: bool,
               marked: bool, acts: bool) -> tuple[list[int], list[Any]] | None:
        """Fire an epoch on ``line`` when it pays (in place): the client indices it cleared
        and the messages as they now go out."""
        tokens = counter.messages(current)
        if tokens < trigger(ctx.model, self.config):
            return None
        seen = observations(original)
        new = self._candidates(original, line.cleared, ctx.kind == AGENT, seen, counter, acts)
        requests = sum(1 for m in original if isinstance(m, dict) and m.get("role") == "assistant") + 1
        if self.config.way_back:
            new = self._worth(original, new, list(line.cleared), tokens, prices,
                              expected_requests(self.config, requests), counter, acts)
        if not new:
            return None
        ids = {**line.cleared, **{i: message_hash(original[i]) for i in new}}
        after = self._cleared(list(ctx.messages), original, ids, counter, acts)
        cleared = tokens - counter.messages(after)
        # the first epoch also adds context_recall to the client's tools (before every
        # message): the whole request is new (a client that sent no tools gets none); on
        # Anthropic all after the system prompt's breakpoint is, unless the end of the
        # stable prefix carries one (``mark_stable``)
        first = 0 if not line.epochs and ctx.tools else system_prefix_len(after) if prices.breakpoints and not marked \
            else min((j for j, (a, b) in enumerate(zip(current, after)) if a is not b),
                     default=len(after))
        after_first = counter.messages(after[first:])
        growth = self._clearable(original, seen, counter) / requests
        p = plan(self.config, prices, cleared, after_first, requests, growth, cold)
        if not p.fire:
            return None
        line.cleared = ids
        line.at = len(original)
        line.epochs.append(Epoch(line.epoch + 1, len(original), len(new), cleared,
                                 round(p.miss, 1), round(p.save, 1), p.reason))
        return new, after

    def _worth(self, original: list[Any], new: list[int], cleared: list[int], request: int,
               prices: Prices, horizon: int, counter: TokenCounter, acts: bool) -> list[int]:
        """The candidates worth more than their expected way back (``way_back.py``)."""
        rate = reread_rate(original, cleared)
        out = []
        for i in new:
            fields = (self._clear(original[i], counter, acts) or ({}, []))[0]
            tokens = counter.text(text_of(original[i]))
            kept = counter.text(fields["content"]) if "content" in fields else tokens
            if worth_clearing(tokens, kept, request, horizon, prices.cached, rate):
                out.append(i)
        return out

    def _marks_stable(self, ctx: RequestContext) -> bool:
        """Whether the end of the stable prefix gets a breakpoint: ``mark_stable`` and
        the client set 1-3 of its own (on messages and tools), so one more stays within
        the provider's 4."""
        if not self.config.mark_stable:
            return False
        marks = mark_count(ctx.tools or []) + mark_count(ctx.original if ctx.original is not None else ctx.messages)
        return 0 < marks < MAX_BREAKPOINTS

    def _stable_end(self, original: list[Any], cleared: dict[int, str], agent: bool,
                    counter: TokenCounter, acts: bool) -> int | None:
        """Client index of the last message no later epoch changes, given what is
        cleared so far: the one before the first result or assistant turn an epoch could
        still clear (keeping and pins aside). None when that is the newest message."""
        pins = set(pinned(original, agent))
        seen = observations(original)
        for i, m in enumerate(original):
            if i in cleared or i in pins or not isinstance(m, dict):
                continue
            if (m.get("role") in ("tool", "assistant") or i in seen) and self._clear(m, counter, acts) is not None:
                return i - 1 if 0 < i < len(original) else None
        return None


_MISSING: Any = object()
