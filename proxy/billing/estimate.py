"""The honest bill, per request, after the response (``proxy/recording/finish.py`` calls it).

- Counterfactual: what the provider would have billed as cache reads and writes had
  the client sent its *original* request directly, from the session's earlier original
  requests (``context_engine.proxy.billing.cache_model``; ``openai`` or ``anthropic`` from the model's
  ``litellm_provider``). ``aggregate.row_costs`` prices the original with it. Every
  API is estimated on its adapter's neutral form (Chat Completions messages, Responses
  input items, Anthropic system + messages with their ``cache_control`` blocks). A
  Responses request continuing server-held history (``previous_response_id``,
  ``conversation``) shows the proxy only its new items: the provider's cached prefix is
  that history either way, so the original's reads are taken as billed. The provider's
  cache is per organisation, not per session: where the bill shows more cache reads than
  the session's history explains (another session of the same agent wrote the tool
  schemas and system prompt), the original is taken to read them too, up to the prefix
  it shares with what was sent (``billed_floor``).
- Prefix diagnostics of what the proxy sent against what it sent last for the session:
  tokens of the kept prefix; when it broke, the first changed message index (-1: the
  tool definitions) and the cause: ``client`` (its own history changed), the first rule
  in run order whose output stopped extending its previous output, or ``failed_open``.
- Provider misses: the provider reported less than half of the cache reads the model
  expected from what the proxy kept (at least 1,024 tokens).
- Bad input (breakpoints on unknown part types, more than 4 breakpoints) is noted.

State per session: two caches of prefix digests (a session of n messages holds about n
entries in each, at most ``max_entries``), the last sent signature and one digest per
rule. Sessions are evicted least recently used first; the worst case is about
``max_sessions`` × 2 × ``max_entries`` entries of ~150 bytes (~300 MB), a typical
session a few hundred KB at most. The work (one JSON dump and hash per message) runs
on the event loop after the response has been relayed, never before forwarding.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any

from context_engine.proxy.billing import cache_model
from context_engine.proxy.billing.cache_model import PrefixCache
from context_engine.proxy.billing.pricing import price_for
from context_engine.proxy.engine.prefix import (
    MARK,
    MAX_BREAKPOINTS,
    SegmentCache,
    Signature,
    digest,
    shared_segments,
    signature,
)
from context_engine.proxy.engine.tokens import counter_for_model

KNOWN_PARTS = frozenset({"text", "image_url", "input_audio", "file", "refusal",  # chat
                         "image", "document", "search_result",  # Anthropic blocks
                         "input_text", "input_image", "input_file", "output_text"})  # Responses
MISS_MIN = cache_model.OPENAI_MIN


@dataclass
class SessionState:
    kind: str
    original: PrefixCache
    sent: PrefixCache
    last_sent: Signature | None = None
    stages: dict[str, tuple[int, bytes]] = field(default_factory=dict)


def caching_kind(model: str) -> str:
    price = price_for(model)
    return price.caching if price is not None else "openai"


def input_notes(messages: list[Any], tools: list[Any] | None) -> list[str]:
    """Cache markers a provider may reject: on unknown part types, more than 4."""
    notes, marks = [], 0
    for t in tools or ():
        marks += isinstance(t, dict) and MARK in t
    for m in messages:
        if not isinstance(m, dict):
            continue
        marks += MARK in m
        content = m.get("content")
        for part in content if isinstance(content, list) else ():
            if isinstance(part, dict) and MARK in part:
                marks += 1
                if part.get("type") not in KNOWN_PARTS:
                    notes.append(f"cache_control on a {str(part.get('type'))[:40]!r} part")
    if marks > MAX_BREAKPOINTS:
        notes.append(f"{marks} cache_control breakpoints from the client (providers allow 4)")
    return notes


def billed_floor(est: cache_model.CacheUse, billed_reads: int, original: Signature,
                 sent: Signature) -> cache_model.CacheUse:
    """``est`` raised to what the provider's bill proves: the sent request read
    ``billed_reads`` cached tokens (in the proxy's token counts), so the original, which
    shares its first segments with it, would have read as many of them. This covers
    prefixes cached by *other* sessions (the provider's cache is per organisation: a
    fleet of sessions shares its agent's tool schemas and system prompt), which the
    session's own history cannot see."""
    if not billed_reads or billed_reads <= est.read:
        return est
    shared = shared_segments(original, sent)
    floor = min(billed_reads, original.ends[shared - 1] if shared else 0)
    if floor <= est.read:
        return est
    return cache_model.CacheUse(floor, max(0, est.write - (floor - est.read)))


def _proxy_tokens(billed: Any, facts: BillFacts) -> int:
    """``billed`` provider tokens in the proxy's token counts (``row_bill`` scales back)."""
    prompt, sent = facts.prompt_tokens, facts.tokens_sent
    if not isinstance(billed, int) or isinstance(billed, bool) or billed <= 0:
        return 0
    if isinstance(prompt, int) and prompt > 0 and isinstance(sent, int) and sent > 0:
        return billed * sent // prompt
    return billed


@dataclass(frozen=True)
class BillFacts:
    """What the estimate reads of a request and its reply (ledger row columns)."""

    model: str
    session: str
    ts: float
    arm: str
    status: int
    failed_open: bool  # also a rewrite the wire format could not carry
    tokens_sent: int
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    cache_write_tokens: int | None = None
    server_state: bool = False  # the provider holds the history (Responses)


@dataclass(frozen=True)
class BillEstimate:
    """The ledger row's bill columns (``observe``)."""

    cache_notes: str = ""
    billing: str = ""
    est_cached_original: int | None = None
    est_write_original: int | None = None
    est_cached_sent: int | None = None
    prefix_kept_tokens: int | None = None
    prefix_break_index: int | None = None
    prefix_break_rule: str = ""
    provider_missed_tokens: int = 0


class BillEstimator:
    def __init__(self, max_sessions: int = 1024, max_entries: int = 1024) -> None:
        self.max_sessions = max_sessions
        self.max_entries = max_entries
        self.sessions: OrderedDict[str, SessionState] = OrderedDict()
        self.segments = SegmentCache()

    def _state(self, session: str, kind: str) -> SessionState:
        st = self.sessions.get(session)
        if st is None or st.kind != kind:
            ttl = cache_model.TTL[kind]
            st = self.sessions[session] = SessionState(kind, PrefixCache(ttl, self.max_entries),
                                                       PrefixCache(ttl, self.max_entries))
        self.sessions.move_to_end(session)
        while len(self.sessions) > self.max_sessions:
            self.sessions.popitem(last=False)
        return st

    def observe(self, facts: BillFacts, body: dict[str, Any], rewrite: Any,
                notes: list[str]) -> BillEstimate:
        """The bill columns of one request, in the order requests finished."""
        original = body.get("messages") or []
        tools = body.get("tools") if isinstance(body.get("tools"), list) else None
        notes = notes + input_notes(original, tools)
        bill = BillEstimate(cache_notes="; ".join(notes)[:500])
        if not facts.status or facts.status >= 400:
            return bill  # nothing was billed or cached
        kind = caching_kind(facts.model)
        if facts.server_state:  # the provider holds the history: same prefix
            return replace(bill, billing=kind, est_cached_original=facts.cached_tokens or 0,
                           est_write_original=facts.cache_write_tokens or 0)
        st = self._state(facts.session, kind)
        counter, _ = counter_for_model(facts.model)
        memo: dict[int, tuple[bytes, int]] = {}
        now = facts.ts
        orig_sig = signature(original, tools, counter, memo, self.segments)
        est = cache_model.use(kind, orig_sig, st.original, now, facts.model)
        result = rewrite.result if rewrite is not None else None
        rewritten = result is not None and facts.arm == "rewrite" and not result.failed_open \
            and not facts.failed_open
        sent = result.ctx.messages if rewritten and result is not None else original
        sent_sig = orig_sig if sent is original else signature(sent, tools, counter, memo, self.segments)
        est = billed_floor(est, _proxy_tokens(facts.cached_tokens, facts), orig_sig, sent_sig)
        expected = cache_model.use(kind, sent_sig, st.sent, now, facts.model)
        missed = 0
        if facts.cached_tokens is not None and expected.read >= MISS_MIN and \
                facts.cached_tokens < expected.read // 2:
            missed = expected.read - facts.cached_tokens
        bill = replace(bill, billing=kind, est_cached_original=est.read, est_write_original=est.write,
                       est_cached_sent=expected.read, provider_missed_tokens=missed)
        cause = self._stage_cause(st, original, result, memo)
        last, st.last_sent = st.last_sent, sent_sig
        if last is None:
            return bill
        kept = shared_segments(last, sent_sig)
        bill = replace(bill, prefix_kept_tokens=sent_sig.ends[kept - 1] if kept else 0)
        if kept < len(last.chain):
            if kept == 0:
                cause = "client"  # the tool definitions changed; rules never touch them
            elif result is not None and result.failed_open and cause is None:
                cause = "failed_open"
            bill = replace(bill, prefix_break_index=kept - 1, prefix_break_rule=cause or "unattributed")
        return bill

    def _stage_cause(self, st: SessionState, original: list[Any], result: Any,
                     memo: dict[int, tuple[bytes, int]]) -> str | None:
        """The first stage (the client, then each rule) whose output stopped extending its
        output of the session's previous request; records this request's stages."""
        stages: list[tuple[str, Any]] = [("client", original)]
        if result is not None:
            stages += [(e.rule, e.output) for e in result.journal
                       if getattr(e, "output", None) is not None]
        cause = None
        for name, messages in stages:
            prev = st.stages.get(name)
            running = hashlib.blake2b(digest_size=16)
            at_prev = None
            for i, m in enumerate(messages):
                got = memo.get(id(m))
                if got is None:
                    got = memo[id(m)] = (digest(m), 0)
                running.update(got[0])
                if prev is not None and i == prev[0] - 1:
                    at_prev = running.digest()
            if cause is None and prev is not None and prev[0] > 0 and at_prev != prev[1]:
                cause = name
            st.stages[name] = (len(messages), running.digest())
        return cause
