"""A session's recall state, decided with each rewrite (``Engine.rewrite``).

After the rules, ``recall_marks`` marks every lossy spot. The first lossy rewrite of a
session turns the ``context_recall`` tool on for it (store key ``recall:on:<session>``),
and every later request of the session offers the tool too, lossy or not, so the tools
prefix stays the same for prompt caching; with a disk or Redis store that survives
restarts. A store outage falls back to "on when this rewrite is lossy".
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from context_engine.proxy.engine.contract import Fencing
from context_engine.proxy.engine.pipeline import PipelineResult
from context_engine.proxy.engine.recall_marks import mark
from context_engine.proxy.engine.recall_options import RecallOptions
from context_engine.proxy.engine.recall_resolve import RecallScope
from context_engine.proxy.engine.tokens import TokenCounter
from context_engine.proxy.store.stores import Store, StoreUnavailable

log = logging.getLogger("context_engine.recall")
STATE_PREFIX = "recall:on:"


@dataclass
class RecallState:
    offer: bool  # add the tool to this request and answer its calls
    scope: RecallScope


def apply_recall(options: RecallOptions, store: Store, original: list[Any], result: PipelineResult,
                 counter: TokenCounter, session_id: str, can_offer: bool,
                 fencing: Fencing | None = None) -> RecallState | None:
    """Mark ``result`` (in place: its messages and ``tokens_after``) and decide the tool;
    recalled text is fenced by ``fencing`` (a rule that fenced this request's data)."""
    if not options.enabled or result.failed_open:
        return None
    sent = list(result.ctx.messages)
    marked = mark(original, sent, can_offer, options.min_gap_chars)
    if marked.lossy:
        old, new = {id(m) for m in sent}, {id(m) for m in marked.messages}
        result.tokens_after += sum(counter.message(m) for m in marked.messages if id(m) not in old) \
            - sum(counter.message(m) for m in sent if id(m) not in new)
        result.ctx = result.ctx.replace(messages=marked.messages)
    fence: Callable[[str], str] | None = None
    if fencing is not None:
        fence = functools.partial(fencing.fence, session_id)
    scope = RecallScope(original, set(marked.ids), marked.hidden, store, fence, options.max_chars,
                        result.ctx.caller, options.max_total_chars)
    return RecallState(can_offer and _session_on(store, session_id, marked.lossy), scope)


def _session_on(store: Store, session_id: str, lossy: bool) -> bool:
    key = STATE_PREFIX + session_id
    try:
        if store.get(key) is not None:
            return True
        if lossy:
            store.set(key, b"1")
    except StoreUnavailable:
        log.warning("recall: store unavailable; the tool is offered only with a lossy rewrite")
    return lossy
