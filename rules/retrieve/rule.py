"""retrieve: long memory over turns that left the window, injected as one cited zone.

What it does
    Turns in closed blocks (older than ``window`` units, closed every ``block`` units, as
    ``summarize`` aligns them) leave the request and are indexed for this session only:
    one chunk per turn, long tool output cut by records, each chunk keeping its turn
    number, speaker, session/date header and tool name. On a user turn that names an id
    or mainly asks (or asks advice) about something the window lacks (not "thanks"/"ok"/
    "好的", not news with a question back: ``query.asks_for_memory``), a hybrid search
    (BM25 over stemmed words and CJK bigrams + faiss cosine over sentence embeddings, fused; BM25
    weighted up for ids, numbers, dates, code; the question also in its parts and without
    its speakers' names; its month and year scoping sessions; optionally names in
    the best hits searched again; neighbouring turns decayed by distance — ``memory_search``)
    picks the relevant snippets, and they come back as one ``[context-engine:memory]``
    user message just before that user turn. The zone holds ``max_snippet_tokens``; a
    question asking for several things or a judgement (``query.is_broad``) gets
    ``broad_budget`` and proportionally more seeds; between a user and an assistant
    ``self_share`` of it goes to the user's own statements (``profile``; ``self_gate``:
    every question, or those asking advice); statements of several turns on
    the question's subject are marked latest and earlier (``updates``). Between named
    people, a short reaction fills the zone after the turns that tell (``length_prior``).

Cost
    By default (``ranking: request``) a request ranks every chunk with ``cold_embedder``'s
    static table, each token weighted by its idf over the session's chunks (~40 ms for
    419 turns; ``cold``), else by BM25 alone: the bytes sent depend on the request and
    the committed zones only, never on background timing, so replicas agree. With
    ``ranking: stored`` (nothing embedded until turns leave) vectors of the main embedder come from the
    store; a request embeds at most ``max_embed`` missing ones (the best BM25 candidates
    first), ``prefetch`` (background) the rest and the turns leaving at the next block
    boundary; the static table ranks until the store has any. A zone holds at most
    ``max_zone_tokens``.

Why
    Clients resend the whole history; most of it is irrelevant to the current turn.
    Cache-aware: the zone injected for a user turn stays where it is, byte-identical,
    until the next block closes, so the provider's prompt cache keeps hitting; snippets
    already visible are not injected again; nothing changes while the dropped history is
    under ``min_closed_tokens``.

Example
    [system, 400 old turns…, u: "what did I say about the Berlin trip?", a: …, u: "thanks"]
    → [system, memory zone (#12 user: "Berlin in May…", #13 …), recent turns…]

Options
    See ``RetrieveConfig``.

Risks
    A fact that no query finds is not in the request any more; summaries (``summarize``)
    or a larger ``max_snippet_tokens`` reduce that risk.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import Any

from context_engine.proxy.engine.context import MemoryFigures, RequestContext
from context_engine.proxy.engine.contract import RuleDeps
from context_engine.proxy.engine.messages import (
    fingerprint,
    is_memory,
    last_user_index,
    system_prefix_len,
    text_of,
)
from context_engine.proxy.engine.sessions import AGENT
from context_engine.proxy.engine.tokens import TokenCounter
from context_engine.rules.retrieve.assemble import assemble, saves
from context_engine.rules.retrieve.cold import ColdRanking
from context_engine.rules.retrieve.committed import ZONE_PREFIX, Zone, commit, committed
from context_engine.rules.retrieve.config import RetrieveConfig
from context_engine.rules.retrieve.embedder_static import cold_embedder
from context_engine.rules.retrieve.embedders import make_embedder
from context_engine.rules.retrieve.index import Chunk, EmbeddingCache, SessionIndex, chunk_messages
from context_engine.rules.retrieve.knowledge_base import KnowledgeBase
from context_engine.rules.retrieve.prefetch import Prefetcher
from context_engine.rules.retrieve.profile import own_turns
from context_engine.rules.retrieve.query import asks_advice, is_broad, needs_memory, terms
from context_engine.rules.retrieve.search import (
    SNIPPET_OVERHEAD,
    Hit,
    SearchParams,
    fused_scores,
    select,
)
from context_engine.rules.retrieve.updates import mark_updates, unseen_subject
from context_engine.rules.retrieve.window import Tail, source

log = logging.getLogger("context_engine.retrieve")
ZONE_OVERHEAD = 30  # message framing, header and intro lines of one zone


class Retrieve:
    name = "retrieve"
    Config = RetrieveConfig

    def __init__(self, config: RetrieveConfig, deps: RuleDeps) -> None:
        self.config = config
        self.deps = deps
        self.embedder = deps.embedder or make_embedder(config.embedder)
        self.cache = EmbeddingCache(self.embedder, deps.store)
        self.cold = cold_embedder(config.cold_embedder)
        self.cold_ranking = ColdRanking(self.cold) if self.cold is not None else None
        self.sessions: OrderedDict[str, SessionIndex] = OrderedDict()
        self._lock = threading.Lock()  # guards ``sessions``; each index has its own lock
        self.tail = Tail(config.window, config.block, config.min_closed_tokens,
                         config.min_drop_ratio, config.keep_tool_units)
        self.ahead = Prefetcher(self.cache, self._tail_chunks, 4 * config.max_sessions)
        self.kb = KnowledgeBase.load(config.knowledge_dir, self.cache, config.knowledge_date) \
            if config.knowledge_dir else None
        self.params = SearchParams(config.top_k, config.threshold, config.neighbours,
                                   config.max_overlap, config.max_snippet_tokens, config.bm25_weight,
                                   config.bm25_weight_exact, config.speaker_weight, config.fusion,
                                   config.expansion, config.neighbour_decay, config.name_blind,
                                   config.date_boost, config.length_prior)
        log.info("retrieve: embedder %s", self.embedder.name)

    def embedded(self) -> int:
        """Texts sent to the embedder (the contract's ``Embedding``)."""
        return self.cache.embedded

    def blocks(self) -> tuple[int, int]:
        """``(window, block)``: turns leave in closed blocks (the contract's ``ClosedBlocks``)."""
        return self.config.window, self.config.block

    def _chunks(self, msgs: list[Any], start: int, end: int, keep: frozenset[int]) -> list[Chunk]:
        return chunk_messages(msgs, start, end, self.config.max_chunk_chars, True, keep,
                              self.config.context_chars)

    def _tail_chunks(self, msgs: list[Any], start: int, end: int) -> list[Chunk]:
        """The chunks turns ``start:end`` will have when they leave (``prefetch``)."""
        return self._chunks(msgs, start, end, self.tail.kept(msgs, start, end))

    def _index(self, session: str) -> SessionIndex:
        with self._lock:
            idx = self.sessions.pop(session, None) or SessionIndex(session, self.cache)
            self.sessions[session] = idx
            while len(self.sessions) > self.config.max_sessions:
                self.sessions.popitem(last=False)
        return idx

    def prefetch(self, pause: Callable[[], None] | None = None) -> int:
        """``ranking: stored``: embed, between requests, the dropped turns searched without
        vectors and those the next block boundary drops; returns the texts embedded."""
        return self.ahead.run(pause)

    def forget(self, session: str) -> None:
        """The upstream refused the session's last request: its background embeddings are
        not queued, and its index leaves the process (the contract's ``Forgetting``)."""
        self.ahead.forget(session)
        with self._lock:
            self.sessions.pop(session, None)

    def _vectorize(self, idx: SessionIndex, query: str, allowance: list[int]) -> None:
        """Vectors for the search of ``query``: from the store, else embedded, the best
        BM25 candidates first, at most ``max_embed`` per request (``allowance``); the
        rest go to the background lane (BM25 ranks them until then). A cold index (none
        stored yet) embeds nothing (two vectors changed no dev evidence and cost ~100 ms)."""
        if self.config.max_embed == 0:
            idx.vectorize()
            return
        if not idx.missing() or not idx.has_vector().any():
            return
        bm = idx.bm25_scores(terms(query))
        order = sorted(range(len(idx.chunks)), key=lambda i: (-bm[i], -i))
        _, embedded = idx.vectorize(order, allowance[0], lookup=False)  # looked up in apply
        allowance[0] -= embedded

    def _needs_memory(self, query: str, window: list[str], idx: SessionIndex) -> bool:
        always = self.config.gate == "always" or self.kb is not None
        advice = self._advice(idx)  # (a user and an assistant, as for the subject below)
        unseen = unseen_subject(idx, query, "\n".join(window)) if advice and self.config.mark_updates \
            else frozenset()
        return needs_memory(query, window, idx.vocabulary, always, advice, unseen, not idx.voices)

    def _advice(self, idx: SessionIndex) -> bool:
        """Advice requests (``self_share``) count between a user and an assistant, not
        between named people ("Caroline: any tips?" is conversation)."""
        return self.config.self_share > 0 and not idx.voices

    def _recall(self, idx: SessionIndex, query: str, visible: str, counter: TokenCounter,
                budget: int, allowance: list[int]) -> list[Hit]:
        if budget <= 0:
            return []
        embed: Callable[[list[str]], Any] = self.cache.get
        hits: list[Hit] = []
        wide = max(1.0, budget / self.params.max_tokens)  # a broad question's budget: more seeds
        params = replace(self.params, max_tokens=budget, top_k=round(self.params.top_k * wide))
        if idx.chunks:
            stored = self.config.ranking == "stored"
            if stored:
                self._vectorize(idx, query, allowance)
            ranked, rank_embed = self.cold_ranking.index(idx) \
                if self.cold_ranking is not None and not (stored and idx.has_vector().any()) else (idx, embed)
            scores = fused_scores(ranked, query, rank_embed, params)
            asked = self.config.self_gate == "always" or asks_advice(query)
            own = own_turns(idx, scores) if self._advice(idx) and asked else []
            hits = select(ranked, scores, visible, params, counter, own, int(self.config.self_share * budget))
            hits = mark_updates(hits, ranked, query, counter, budget) if self.config.mark_updates else hits
        if self.kb is not None:
            used = sum(counter.text(h.chunk.text) + SNIPPET_OVERHEAD for h in hits)
            hits += self.kb.search(query, embed, params, counter, budget - used)
        return hits

    async def apply(self, ctx: RequestContext) -> RequestContext:
        if self.config.sessions == "chat" and ctx.kind == AGENT:
            return ctx  # an agent works from its recent turns: compact plans its session
        if any(is_memory(m) for m in ctx.messages):
            return ctx  # already rewritten: applying twice changes nothing more
        msgs = list(ctx.messages)
        counter = TokenCounter(ctx.encoding)
        lu = last_user_index(msgs)
        if lu < 0:
            return ctx
        head = system_prefix_len(msgs)
        cut = self.tail.epoch_cut(msgs, counter)
        if cut <= head and self.kb is None:
            return ctx  # nothing leaves: no memory work at all for this session yet
        session = ctx.session_id or fingerprint(msgs[:head + 1])
        keep = self.tail.kept(msgs, head, cut)
        indexed = source(ctx, msgs, head, cut, keep)
        stored = self.config.ranking == "stored"
        if cut > head and stored:
            self.ahead.remember(session, indexed[0], indexed[2])
        idx = self._index(session)
        with idx.lock:  # a session's index is used by one request at a time
            chunks = self._chunks(*indexed)
            if not stored and self.cold_ranking is not None:
                self.cold_ranking.prepare(idx, chunks)  # tokenized beside the BM25 terms
            idx.sync(chunks)
            if stored:
                unembedded, _ = idx.vectorize(cap=0)  # what the store has; the rest in background
                if unembedded:
                    self.ahead.fill(session, [idx.chunks[i].embed_text for i in unembedded])
            zones = self._zones(msgs, head, cut, lu, idx, counter, keep, session)
            return self._rewritten(ctx, msgs, head, cut, lu, idx, zones, keep)

    def _rewritten(self, ctx: RequestContext, msgs: list[Any], head: int, cut: int, lu: int,
                   idx: SessionIndex, zones: dict[int, Zone],
                   keep: frozenset[int]) -> RequestContext:
        if cut <= head and not zones:
            return ctx
        out = assemble(msgs, head, cut, zones, keep, self.config.position)
        if out == ctx.messages or self.kb is None and not saves(msgs, out, TokenCounter(ctx.encoding)):
            return ctx  # (a knowledge base's clauses come in whatever leaves: they are its point)
        last = zones.get(lu)
        injected = list(last.injected) if last else []
        figures = MemoryFigures(injected, list(last.scores) if last else [], cut - head,
                                len(idx.chunks), idx.oscillation(injected))
        note = {**asdict(figures), "embedder": self.embedder.name,
                "zones": len(zones), "unembedded": len(idx.missing())}
        return ctx.replace(messages=out, memory=figures).with_note(self.name, note)

    def _zones(self, msgs: list[Any], head: int, cut: int, lu: int, idx: SessionIndex,
               counter: TokenCounter, keep: frozenset[int], session: str) -> dict[int, Zone]:
        """The memory zone of each user turn of the current block epoch, oldest first.

        A user turn's zone is what was retrieved when it was the last message: same
        closed prefix (same epoch), same window before it. It is committed to the store
        the first time (``retrieve:zone:<key>``, "none" included), and later requests,
        on any replica, send the committed text: the cached prefix stays valid whatever
        the background has embedded since. All zones together never cost more than the
        history they replace.
        """
        zones: dict[int, Zone] = {}
        users = [i for i in range(cut, lu + 1) if msgs[i].get("role") == "user"]
        if self.config.position == "after_system":
            users = [lu]
        dropped = [msgs[i] for i in range(head, cut) if i not in keep]
        left = counter.messages(dropped) if dropped else self.params.max_tokens
        replaced = left
        kept_text = [text_of(msgs[i]) for i in sorted(keep)]
        allowance = [self.config.max_embed]  # texts this request may still embed
        for u in users:
            if u != lu and self.tail.epoch_cut(msgs[: u + 1], counter) != cut:
                continue
            key = ZONE_PREFIX + fingerprint(session, cut, [text_of(m) for m in msgs[head:u + 1]])
            found, zone = committed(self.deps.store, key)
            if not found:
                query = text_of(msgs[u])
                window = kept_text + [text_of(m) for m in msgs[cut:u]] + [z.text for z in zones.values()]
                zone = None
                if self._needs_memory(query, window, idx):
                    wanted = self.config.broad_budget if self.config.broad_budget and is_broad(query) \
                        else self.params.max_tokens
                    wanted = max(wanted, int(self.config.budget_share * replaced))
                    wanted = min(wanted, self.config.max_zone_tokens) if self.config.max_zone_tokens else wanted
                    budget = min(wanted, left - ZONE_OVERHEAD)
                    hits = self._recall(idx, query, "\n".join(window), counter, budget, allowance)
                    zone = Zone.of(hits) if hits else None
                zone = commit(self.deps.store, key, zone)
            if zone is not None:
                zones[u] = zone
                left -= counter.message({"role": "user", "content": zone.text})
        return zones
