"""The rewrite engine: settings → deps → rules → pipeline. Shared by the server and the bench."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from context_engine.proxy.engine import profiles, provider_compaction
from context_engine.proxy.engine.ab_guard import AbGuard
from context_engine.proxy.engine.breakpoints import AUTO_BLOCKS, mark_stable, restore
from context_engine.proxy.engine.commits import Commits
from context_engine.proxy.engine.context import RequestContext
from context_engine.proxy.engine.contract import (
    Embedder,
    Embedding,
    Forgetting,
    Prefetching,
    Registry,
    Rule,
    RuleDeps,
)
from context_engine.proxy.engine.lanes import (
    BackgroundLane,
    LaneClosed,
    RequestLane,
    limit_blas_threads,
    observe,
)
from context_engine.proxy.engine.messages import mark_client_text, text_of
from context_engine.proxy.engine.pending_writes import PendingWrites, RoutedStore
from context_engine.proxy.engine.pipeline import Pipeline, PipelineResult, PipelineStats
from context_engine.proxy.engine.recall_state import apply_recall
from context_engine.proxy.engine.rewrite import Rewrite
from context_engine.proxy.engine.sessions import session_kind
from context_engine.proxy.engine.tokens import counter_for_model, get_encoding
from context_engine.proxy.store.scopes import writing_as
from context_engine.proxy.store.stores import Store, open_store

if TYPE_CHECKING:  # the settings import the rules, which import the engine
    from context_engine.proxy.settings import Settings

log = logging.getLogger("context_engine.engine")
ESTIMATE_CHARS = 256 * 1024  # text above which a failed-open request's tokens are estimated


class Engine:
    def __init__(self, settings: Settings, store: Store | None = None,
                 rules: list[Rule] | None = None, embedder: Embedder | None = None,
                 registry: Registry | None = None) -> None:
        self.settings = settings
        self.store = store if store is not None else open_store(settings.store, settings.store_ttl_days * 86400,
                                                                settings.store_scope_bytes)
        self.routed = RoutedStore(self.store)  # the rules write into the rewrite's PendingWrites
        self.deps = RuleDeps(store=self.routed, embedder=embedder)
        self.stats = PipelineStats()
        self.guard = AbGuard(settings.ab_guard_rereads_per_session, settings.ab_guard_min_sessions)
        self.pipeline = Pipeline(rules if rules is not None else settings.build_rules(self.deps, registry),
                                 self.stats)
        # one pipeline per profile and the lossless one (X-Context-Engine-Rules), built once
        self.pipelines = {"default": self.pipeline, "off": Pipeline([], self.stats)} | ({} if rules is not None else {
            name: Pipeline(s.build_rules(self.deps, registry), self.stats)
            for name, s in profiles.variants(settings, settings.lossless(registry)).items()})
        # auto breakpoints: the block layout of each pipeline's rules, else the default one's
        fallback = self.pipeline.blocks()
        self.blocks = {name: p.blocks() or fallback for name, p in self.pipelines.items()}
        for name in ("o200k_base", "cl100k_base"):  # load encodings now, not on a first request
            get_encoding(name)
        # Rules are CPU work: the server runs them off its event loop (``context_engine.proxy.engine.lanes``), one
        # session at a time in order, sessions in parallel; prefetching and shadow
        # rewrites in a background lane that gives way to requests. Each thread has its
        # own BLAS thread (parallelism comes from the sessions, not from one matrix).
        workers = settings.rule_workers or os.cpu_count() or 1
        self.requests = RequestLane(workers, settings.rules_queue)
        self.background = BackgroundLane(settings.rules_queue, self.requests)
        self.deadline_s = settings.rules_deadline_ms / 1000 if settings.rules_deadline_ms > 0 else None
        self._prefetchers = [r for p in self.pipelines.values() for r in p.rules
                             if isinstance(r, Prefetching)]
        self._prefetch_queued = threading.Event()
        self._worker_loop = threading.local()
        if any(p.rules for p in self.pipelines.values()):
            limit_blas_threads(1)
        self.commits = Commits(self.queue_prefetch, [  # held writes, committed in ``settle``
            r for r in {id(r): r for p in self.pipelines.values() for r in p.rules}.values()
            if isinstance(r, Forgetting)])

    def _rewrite_in_worker(self, body: dict[str, Any], session_id: str,
                           choice: str | None = None, can_offer: bool = False,
                           caller: str = "", deadline: float | None = None,
                           agent: str = "", hold: bool = True) -> Rewrite:
        loop = getattr(self._worker_loop, "loop", None)
        if loop is None:
            loop = self._worker_loop.loop = asyncio.new_event_loop()
        self.commits.wait(session_id)  # the session's previous request's writes first
        return loop.run_until_complete(self.rewrite(body, session_id, choice, can_offer, caller,
                                                    deadline, agent, hold))

    def deadline_for(self, size: int) -> float | None:
        """Seconds a rewrite of a ``size``-byte request may take: ``rules_deadline_ms``,
        plus ``rules_deadline_per_10k_tokens_ms`` per 10k tokens (bytes / 4: no
        tokenizing on the event loop), at most ``rules_deadline_max_ms`` (or the base, if
        larger); None: no deadline."""
        if self.deadline_s is None:
            return None
        s = self.settings
        scaled = s.rules_deadline_ms + s.rules_deadline_per_10k_tokens_ms * size / 40_000
        return min(scaled, max(s.rules_deadline_max_ms, s.rules_deadline_ms)) / 1000

    async def rewrite_off_loop(self, body: dict[str, Any], session_id: str,
                               choice: str | None = None, can_offer: bool = False,
                               caller: str = "", size: int = 0, agent: str = "") -> Rewrite:
        """``rewrite`` in the request lane (inline when no rule is enabled), then the
        rules' ``prefetch`` queued in the background lane. Past the deadline
        (``deadline_for`` the body's ``size`` in bytes, queueing included), or when the
        lane is full, the original goes out, counted as failed open; a rewrite that has
        not started by then is skipped, and one that has stops before its next rule.
        ``caller`` (the API key's scope) gets its fair share of the lane; ``agent``: the
        client's agent tag."""
        if not any(p.rules for p in self.pipelines.values()):
            return await self.rewrite(body, session_id, choice, can_offer, caller, agent=agent,
                                      hold=True)
        allowed = self.deadline_for(size)
        deadline = time.monotonic() + allowed if allowed is not None else None
        job = self.requests.submit(session_id, functools.partial(self._rewrite_in_worker, body,
                                                                 session_id, choice, can_offer,
                                                                 caller, deadline, agent), caller)
        if job is None:
            self.stats.add("shed")
            return self._original(body, session_id, "rules lane full")
        done = asyncio.wrap_future(job.future)
        done.add_done_callback(observe)
        try:
            result = await asyncio.wait_for(asyncio.shield(done), allowed)
        except TimeoutError:
            job.abandon()
            self.stats.add("deadline")
            log.warning("rewrite of session %s passed its deadline (%.0f ms); original sent",
                        session_id, (allowed or 0) * 1000)
            return self._original(body, session_id, "rules_deadline_ms passed")
        return cast(Rewrite, result)

    async def rewrite_in_background(self, body: dict[str, Any], session_id: str) -> Rewrite | None:
        """``rewrite`` in the background lane (shadow rewrites); None when its queue is full."""
        future: concurrent.futures.Future[Rewrite] = concurrent.futures.Future()

        def job() -> None:
            try:
                future.set_result(self._rewrite_in_worker(body, session_id, hold=False))
            except Exception as exc:
                future.set_exception(exc)

        if not self.background.submit(job):
            return None
        result = await asyncio.wrap_future(future)
        self.queue_prefetch()
        return result

    def queue_prefetch(self) -> None:
        """One prefetch job in the background lane at a time (it covers every session)."""
        if self._prefetchers and not self._prefetch_queued.is_set():
            self._prefetch_queued.set()

            def job() -> None:
                self._prefetch_queued.clear()
                self.prefetch(self.background.pause)

            if not self.background.submit(job):
                self._prefetch_queued.clear()

    def prefetch(self, pause: Callable[[], None] | None = None) -> int:
        """Work rules do between requests (``retrieve`` embeds turns that left or will
        leave the window). It never changes a rewrite's output, only how long the next
        one takes; a failure is logged and forgotten. ``pause`` is called between steps
        (the background lane gives way to requests there). Returns the items prepared."""
        done = 0
        for rule in self._prefetchers:
            try:
                done += int(rule.prefetch(pause) or 0)
            except LaneClosed:  # shutting down
                return done
            except Exception:  # prefetching is an optimisation, never fatal
                log.exception("prefetch of rule %s failed", rule.name)
        return done

    def embedded(self) -> int:
        """Texts this process has sent to an embedder (the rules offering ``Embedding``)."""
        rules = {id(r): r for p in self.pipelines.values() for r in p.rules}.values()
        return sum(r.embedded() for r in rules if isinstance(r, Embedding))

    def lane_stats(self) -> dict[str, int]:
        return {"workers": self.requests.workers, "queued": self.requests.queued,
                "shed": self.requests.shed, "deadline": self.stats.failed_open_by["deadline"],
                "background_pending": self.background.pending,
                "background_dropped": self.background.dropped}

    def close(self) -> None:
        self.background.closing = True  # a running prefetch stops at its next pause
        self.requests.close()
        self.commits.close()
        self.background.close()

    def count(self, body: dict[str, Any]) -> int:
        """Tokens of a request as the client sent it."""
        counter, _ = counter_for_model(str(body.get("model") or ""))
        tools = body.get("tools")
        return counter.request(body["messages"], tools if isinstance(tools, list) else None)

    def _context(self, body: dict[str, Any], session_id: str,
                 caller: str = "", agent: str = "") -> tuple[RequestContext, Any, bool]:
        model = str(body.get("model") or "")
        counter, fallback = counter_for_model(model)
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        tools = body.get("tools")
        messages = mark_client_text(body["messages"])  # a client's look-alike markers stay its own
        ctx = RequestContext(
            messages=messages,
            model=model,
            tools=tools if isinstance(tools, list) else None,
            session_id=session_id,
            caller=caller,
            encoding=counter.encoding,
            max_tokens=max_tokens if isinstance(max_tokens, int) else None,
            original=messages,
            kind=session_kind(messages, self.settings.session_kind),
            agent=agent,
        )
        return ctx, counter, fallback

    def _original(self, body: dict[str, Any], session_id: str, reason: str) -> Rewrite:
        """The request unchanged, as a failed-open rewrite. It is made on the event loop
        when the lane is full or the deadline passed (the machine is busy): a request
        with more than ``ESTIMATE_CHARS`` of text is not tokenized but estimated (4
        characters a token)."""
        ctx, counter, fallback = self._context(body, session_id)
        chars = sum(len(text_of(m)) for m in ctx.messages if isinstance(m, dict))
        problems = [reason]
        if chars > ESTIMATE_CHARS:
            tokens = chars // 4 + 4 * len(ctx.messages)
            problems.append("tokens estimated from the text's length")
        else:
            tokens = counter.request(ctx.messages, ctx.tools)
        result = PipelineResult(ctx, [], tokens, tokens, failed_open=True, problems=problems,
                                original_messages=ctx.messages)
        return Rewrite(result, counter.encoding, fallback)

    async def rewrite(self, body: dict[str, Any], session_id: str, choice: str | None = None,
                      can_offer: bool = False, caller: str = "",
                      deadline: float | None = None, agent: str = "",
                      hold: bool = False) -> Rewrite:
        """Run the pipeline over a parsed chat-completions body (not mutated): the model's
        profile, or ``choice`` (X-Context-Engine-Rules); the client's cache breakpoints
        are then put back (``proxy/engine/breakpoints.py``); then the recall markers, and whether
        ``context_recall`` is offered (``can_offer``: the API and the client allow it).
        ``caller`` is the caller's scope: originals are stored and recalled per caller;
        ``agent`` the client's agent tag. Store writes are committed before it returns, or
        with ``hold`` kept in ``Rewrite.pending`` until the upstream answers (``settle``)."""
        pending = PendingWrites(self.store, caller, session_id)
        with self.routed.pending(pending), writing_as(caller, session_id):
            rewrite = await self._rewrite(body, session_id, choice, can_offer, caller, deadline,
                                          agent, pending)
        if not hold:
            pending.commit()
        return rewrite

    async def settle(self, rewrite: Rewrite | None, status: int) -> None:
        """Commit (shielded: a client gone keeps them) or drop a held rewrite's writes."""
        future = self.commits.settle(rewrite.pending, status) if rewrite and rewrite.pending else None
        if future is not None:
            await asyncio.shield(asyncio.wrap_future(future))

    async def _rewrite(self, body: dict[str, Any], session_id: str, choice: str | None,
                       can_offer: bool, caller: str, deadline: float | None, agent: str,
                       pending: PendingWrites) -> Rewrite:
        live, boundary = provider_compaction.split(body)  # the rules act after the provider's
        ctx, counter, fallback = self._context(live, session_id, caller, agent)
        name = profiles.pick(self.settings, ctx.model, choice)
        pipeline = self.guard.pipeline(session_id, self.pipelines.get(name, self.pipeline))
        result = await pipeline.run(ctx, counter, deadline)
        auto = self.settings.cache.auto_breakpoints
        if (result.changed or auto) and not result.failed_open:
            sent = result.ctx.messages if result.changed else list(result.ctx.messages)
            marked, _ = restore(live["messages"], sent, auto, *(self.blocks.get(name) or AUTO_BLOCKS))
            if result.ctx.stable_end is not None:
                marked = mark_stable(marked, result.ctx.stable_end)
            if marked is not sent:
                result.ctx = result.ctx.replace(messages=marked)
        if boundary is not None:
            boundary.rejoin(result, counter)
        state = apply_recall(self.settings.recall, pending, body["messages"], result, counter,
                             session_id, can_offer, pipeline.fencing(result.ctx.notes))
        return Rewrite(result, counter.encoding, fallback, state, pending)
