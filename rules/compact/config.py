"""The options of ``compact`` (``context-engine rules`` lists them with their help)."""

from __future__ import annotations

from dataclasses import dataclass

from context_engine.proxy.engine.contract import option

SESSIONS = ("agent", "all")


@dataclass(frozen=True)
class CompactConfig:
    sessions: str = option("agent", "agent: plan only agent sessions (tool calls or text-action observations); all: chats too")
    trigger_tokens: int = option(12000, "an epoch may fire once the request as it would be sent holds this many tokens")
    trigger_share: float = option(0.0, "…or this share of the model's input window, when larger than 0 and the window is known (the lower of the two)")
    keep_recent: int = option(3, "the last results (tool results, observations) always kept whole")
    keep_prose: int = option(3, "the last assistant turns whose text is always kept whole (prose: on)")
    prose: bool = option(True, "old assistant turns' text is cleared too (their tool calls stay)")
    keep_related: int = option(4, "an old result whose command names a file that one of the last N assistant turns names stays whole at an epoch (0 = off)")
    input_chars: int = option(300, "a cleared assistant turn's tool-call arguments (a text-action agent's fenced commands) longer than this keep their first line and an orig: id (0 = tool inputs kept whole; a text-action turn's commands go with its text)")
    min_item_tokens: int = option(60, "a result or text shorter than this is never cleared (its placeholder would cost about as much)")
    gist_chars: int = option(300, "a cleared result keeps its skeleton in its placeholder, up to this many characters: definitions with their line numbers, path:line of search hits, traceback frames (the innermost first when they do not fit), error reports (0 = the id alone)")
    identifiers: bool = option(True, "a cleared result's placeholder also lists the identifiers a next call takes (JSON: every key and scalar but long text; text: URLs, e-mails, letter-digit tokens); where they are more than half the result, it stays whole")
    way_back: bool = option(True, "an old item is cleared only when what clearing it saves over the expected remaining requests beats its expected way back: the chance it is needed again (the session's re-reads of cleared results, from a prior of 1 in 10) times a recall round (the request at the cached price plus the item at the input price)")
    clear_at_least: int = option(3000, "an epoch clears at least this many tokens, or does not fire")
    horizon: float = option(1.0, "expected remaining requests = this times the requests so far (the planner's guess at the session's length)")
    min_horizon: int = option(4, "expected remaining requests at least")
    max_horizon: int = option(100, "expected remaining requests at most")
    mark_stable: bool = option(True, "where the client set 1-3 cache breakpoints of its own (Anthropic), one more goes where the prefix no later epoch changes ends, so an epoch re-writes only what it changed (false: the client's breakpoints only)")
    cache_ttl: float = option(300.0, "seconds after which the provider's cache is taken as cold: the next request compacts at no miss cost (0 = never)")
    assumed_cache_read: float = option(0.1, "cached-read price over the input price for models litellm's map does not know")
    assumed_cache_write: float = option(1.0, "cache-write price over the input price for models the map does not know (Anthropic: 1.25)")
