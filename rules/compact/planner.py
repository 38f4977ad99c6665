"""When an epoch pays: the provider's prices against the session's own history.

Between epochs every request re-reads the cached prefix at the cached price. Clearing
``X`` tokens saves about ``X x cached`` on every later request; it costs one miss: the
request from the first changed message on is billed uncached once (``(1 - cached) x A``
input-token equivalents, plus the write premium ``w x A`` where the provider bills cache
writes above the input price). Where the provider caches at the client's breakpoints
(Anthropic: the system prompt and the newest message), ``A`` is the whole request after
the system prompt: no breakpoint stands at the first changed message. The session's remaining requests are guessed from how
many it has made (``horizon``). An epoch fires when the saving over that guess beats the
miss, and clears at least ``clear_at_least`` tokens (Anthropic's ``clear_at_least``).

Paying is not enough: an epoch that fires as soon as it pays fires again a few requests
later, each time for a little. Clearing every ``T`` requests, with ``g`` clearable tokens
arriving per request, costs ``miss / T + cached x g x T / 2`` per request, least at
``T = sqrt(2 x miss / (cached x g))``: an epoch waits until it clears
``sqrt(2 x miss x g / cached)`` tokens (the economic order quantity), ``g`` measured on
the session so far.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from context_engine.proxy.billing.pricing import context_window, price_for
from context_engine.rules.compact.config import CompactConfig


@dataclass(frozen=True)
class Prices:
    cached: float  # cached read over input price
    write: float  # cache write over input price (1.0 = no premium)
    assumed: bool  # litellm's map does not know the model
    # the provider caches at the client's breakpoints (Anthropic): a change after the
    # system prompt re-writes everything after it, not only what follows the change
    breakpoints: bool = False

    @classmethod
    def of(cls, model: str, config: CompactConfig) -> Prices:
        price = price_for(model)
        if price is None or price.input <= 0:
            return cls(config.assumed_cache_read, config.assumed_cache_write, True)
        anthropic = price.caching == "anthropic"
        write = price.cache_write / price.input if anthropic else 1.0
        return cls(price.cached_input / price.input, max(1.0, write), False, anthropic)


@dataclass(frozen=True)
class Plan:
    fire: bool
    reason: str
    miss: float  # input-token equivalents the epoch costs once
    save: float  # input-token equivalents it saves per later request
    horizon: int


def trigger(model: str, config: CompactConfig) -> int:
    """Tokens from which an epoch may fire."""
    window = context_window(model) if config.trigger_share > 0 else 0
    share = int(window * config.trigger_share) if window else 0
    return min(t for t in (config.trigger_tokens, share) if t > 0) if share else config.trigger_tokens


def expected_requests(config: CompactConfig, requests: int) -> int:
    """The session's expected remaining requests, from the requests it made (``horizon``)."""
    return max(config.min_horizon, min(config.max_horizon, round(requests * config.horizon)))


def plan(config: CompactConfig, prices: Prices, cleared: int, after_first: int,
         requests: int, growth: float, cold: bool) -> Plan:
    """Whether clearing ``cleared`` tokens pays, when ``after_first`` tokens of the new
    request stand from its first changed message on, the session made ``requests`` and
    adds ``growth`` clearable tokens per request."""
    horizon = expected_requests(config, requests)
    save = cleared * prices.cached
    miss = 0.0 if cold else after_first * ((1 - prices.cached) + (prices.write - 1))
    if cleared < config.clear_at_least:
        return Plan(False, "clears too little", miss, save, horizon)
    if cold:
        return Plan(True, "cache cold", miss, save, horizon)
    if save * horizon <= miss:
        return Plan(False, "does not pay", miss, save, horizon)
    if prices.cached > 0 and cleared < math.sqrt(2 * miss * max(growth, 0.0) / prices.cached):
        return Plan(False, "not yet: clears more later", miss, save, horizon)
    return Plan(True, "pays", miss, save, horizon)
