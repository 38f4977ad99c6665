"""The rewrite engine: settings → deps → rules → pipeline. Shared by the server and the bench."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from dataclasses import dataclass
from typing import Any

from proxy.context import RequestContext
from proxy.pipeline import Pipeline, PipelineResult, PipelineStats
from proxy.settings import Settings, build_rules
from proxy.store import Store, open_store
from proxy.tokens import counter_for_model, get_encoding
from rules.base import RuleDeps

log = logging.getLogger("context_engine.engine")

@dataclass
class Rewrite:
    result: PipelineResult
    encoding: str
    encoding_fallback: bool


class Engine:
    def __init__(self, settings: Settings, store: Store | None = None,
                 rules: list[Any] | None = None, extra: dict[str, Any] | None = None) -> None:
        self.settings = settings
        self.store = store if store is not None else open_store(settings.store)
        self.deps = RuleDeps(store=self.store, extra=dict(extra or {}))
        self.stats = PipelineStats()
        self.pipeline = Pipeline(rules if rules is not None else build_rules(settings, self.deps),
                                 self.stats)
        for name in ("o200k_base", "cl100k_base"):  # load encodings now, not on a first request
            get_encoding(name)
        # Rules are CPU work (an embedding can take tens of ms): the server runs them in one
        # worker thread with its own event loop, so the server's loop keeps relaying other
        # streams, and rule state is only ever touched by that one thread.
        self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rules")
        self._prefetchers = [r for r in self.pipeline.rules if callable(getattr(r, "prefetch", None))]
        self._worker_loop = threading.local()

    def _rewrite_in_worker(self, body: dict[str, Any], session_id: str) -> Rewrite:
        loop = getattr(self._worker_loop, "loop", None)
        if loop is None:
            loop = self._worker_loop.loop = asyncio.new_event_loop()
        return loop.run_until_complete(self.rewrite(body, session_id))

    async def rewrite_off_loop(self, body: dict[str, Any], session_id: str) -> Rewrite:
        """``rewrite`` in the rules' worker thread (inline when no rule is enabled), then
        the rules' ``prefetch`` queued on that thread: it runs while the upstream works
        on this request, before the worker takes the next rewrite."""
        if not self.pipeline.rules:
            return await self.rewrite(body, session_id)
        result = await asyncio.get_running_loop().run_in_executor(
            self._worker, self._rewrite_in_worker, body, session_id)
        if self._prefetchers:
            self._worker.submit(self.prefetch)
        return result

    def prefetch(self) -> int:
        """Work rules do between requests (``retrieve`` embeds turns that will leave the
        window). It never changes a rewrite's output, only how long the next one takes;
        a failure is logged and forgotten. Returns the number of items prepared."""
        done = 0
        for rule in self._prefetchers:
            try:
                done += int(rule.prefetch() or 0)
            except Exception:  # prefetching is an optimisation, never fatal
                log.exception("prefetch of rule %s failed", rule.name)
        return done

    def close(self) -> None:
        self._worker.shutdown(wait=True)

    def count(self, body: dict[str, Any]) -> int:
        """Tokens of a request as the client sent it."""
        counter, _ = counter_for_model(str(body.get("model") or ""))
        tools = body.get("tools")
        return counter.request(body["messages"], tools if isinstance(tools, list) else None)

    async def rewrite(self, body: dict[str, Any], session_id: str) -> Rewrite:
        """Run the pipeline over a parsed chat-completions body (not mutated)."""
        model = str(body.get("model") or "")
        counter, fallback = counter_for_model(model)
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        tools = body.get("tools")
        ctx = RequestContext(
            messages=body["messages"],
            model=model,
            tools=tools if isinstance(tools, list) else None,
            session_id=session_id,
            encoding=counter.encoding,
            max_tokens=max_tokens if isinstance(max_tokens, int) else None,
            original=body["messages"],
        )
        result = await self.pipeline.run(ctx, counter)
        return Rewrite(result, counter.encoding, fallback)
