"""After the response: shadow rewrites, context metrics, the ledger row and /metrics.

All of it runs once the response body has been sent: shadow rewrites in the rules'
background lane (so they never hold up the event loop or a request); what grows with the
body (context metrics, the bill estimate's signatures and token counts) in one finishing
thread, in the order requests finished (the estimator's per-session state needs that
order); recording the row and the metrics on the loop.

The rows waiting for that thread (or for a shadow rewrite) hold their parsed bodies, so
they are capped (``MAX_MEASURE_BACKLOG`` rows, ``MAX_MEASURE_BYTES`` of request bodies):
when requests come faster than the thread measures them, the rest are recorded at once
without context metrics or the bill estimate (``context.unmeasured``, counted in
``skipped_measure``), and memory stays flat however long the overload lasts.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
from typing import Any, Protocol

from context_engine.proxy.billing.estimate import BillEstimator
from context_engine.proxy.engine.engine import Engine, Rewrite
from context_engine.proxy.engine.messages import MEMORY_HEADER, text_of
from context_engine.proxy.recording.context_metrics import (
    Oscillation,
    data_segments,
    tool_retries,
    utilization,
)
from context_engine.proxy.recording.ledger import Ledger, LedgerRow

log = logging.getLogger("context_engine.finish")


class Answer(Protocol):
    """What finishing reads of the response (``transport/usage_tap.py``'s ``Usage`` is one)."""

    @property
    def text(self) -> str: ...

    @property
    def notes(self) -> list[str]: ...


MAX_SHADOW_BACKLOG = 256  # shadow rewrites waiting for the rules thread; beyond it, skipped
MAX_MEASURE_BACKLOG = 64  # rows waiting to be measured; beyond it, recorded unmeasured
MAX_MEASURE_BYTES = 64 * 1024 * 1024  # request body bytes those rows may hold
UNMEASURED = "finish backlog full"
REFUSED = frozenset({401, 403})  # the upstream refused the caller: no reply, nothing billed


def fill_from_rewrite(row: LedgerRow, rewrite: Rewrite | None) -> None:
    if rewrite is None:
        row.failed_open = True
        return
    res = rewrite.result
    row.encoding, row.encoding_fallback = rewrite.encoding, rewrite.encoding_fallback
    row.tokens_original, row.tokens_sent = res.tokens_before, res.tokens_after
    row.failed_open = res.failed_open
    row.rule_errors = sum(1 for j in res.journal if j.error)
    if not res.failed_open:
        row.rule_savings = {j.rule: j.saved for j in res.journal}
    row.journal = [{"rule": j.rule, "before": j.tokens_before, "after": j.tokens_after,
                    "ms": round(j.ms, 3), "note": j.note, "error": j.error} for j in res.journal]
    memory = res.ctx.memory
    if memory is not None:
        row.context = memory.columns()
        if memory.oscillation is not None:
            row.oscillation = float(memory.oscillation)
    row.context["kind"] = res.ctx.kind
    if res.ctx.compaction is not None:
        row.context["compaction"] = res.ctx.compaction.columns()


class Finisher:
    def __init__(self, engine: Engine, ledger: Ledger | None, metrics: Any = None) -> None:
        self.engine = engine
        self.ledger = ledger
        self.metrics = metrics
        self.oscillation = Oscillation()
        self.bill = BillEstimator()
        self.pending: set[asyncio.Task[None]] = set()
        self.skipped_shadow = 0
        self.shadow_backlog = 0
        self.max_shadow_backlog = MAX_SHADOW_BACKLOG
        self.skipped_measure = 0
        self.measure_backlog = self.measure_bytes = 0  # rows (and their body bytes) admitted, not done
        self.max_measure_backlog, self.max_measure_bytes = MAX_MEASURE_BACKLOG, MAX_MEASURE_BYTES
        self.unfinished = 0  # rows begun and not yet recorded (for tests and shutdown)
        self._scheduled = asyncio.Event()  # a row was scheduled (``stop`` waits for one)
        self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="finish")

    def begin(self) -> None:
        self.unfinished += 1

    def schedule(self, row: LedgerRow, data: dict[str, Any], rewrite: Rewrite | None,
                 usage: Answer, shadow: bool, size: int = 0) -> None:
        """Finish ``row`` after the response; ``size`` is its request body's length."""
        measure = self.measure_backlog < self.max_measure_backlog and \
            (self.measure_bytes == 0 or self.measure_bytes + size <= self.max_measure_bytes)
        if row.status in REFUSED:  # nothing to measure (a keyless caller's huge body, say)
            row.context["unmeasured"], measure, shadow = "refused", False, False
        if (shadow and self.shadow_backlog >= self.max_shadow_backlog) or (shadow and not measure):
            self.skipped_shadow += 1
            shadow = False
            row.error = row.error or "shadow skipped: backlog full"
        self.shadow_backlog += shadow
        if measure:
            self.measure_backlog, self.measure_bytes = self.measure_backlog + 1, self.measure_bytes + size
        elif "unmeasured" not in row.context:  # the body is let go now; the row is recorded as it is
            self.skipped_measure += 1
            row.context["unmeasured"] = UNMEASURED
        task = asyncio.get_running_loop().create_task(
            self._finish(row, data, rewrite, usage, shadow, size) if measure else self._record(row))
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)
        self._scheduled.set()

    async def _finish(self, row: LedgerRow, data: dict[str, Any], rewrite: Rewrite | None,
                      usage: Answer, shadow: bool, size: int) -> None:
        try:
            if shadow:
                try:
                    rewrite = await _shadow_rewrite(self.engine, data, row.session)
                except asyncio.CancelledError:  # shutting down (``stop``): the row still goes
                    rewrite, row.error = None, row.error or "shadow skipped: shutting down"
                finally:
                    self.shadow_backlog -= 1
                fill_from_rewrite(row, rewrite)
        except Exception:  # the edge: metrics never lose the ledger row
            log.exception("finishing a request failed")
        try:
            await asyncio.get_running_loop().run_in_executor(
                self._worker, self._measure, row, data, rewrite, usage)
        except RuntimeError:  # the worker is shut down (closing): the row goes as it is
            log.warning("finishing thread closed; row recorded without its context metrics")
        finally:
            self.measure_backlog -= 1
            self.measure_bytes -= size
        await self._record(row)

    async def _record(self, row: LedgerRow) -> None:
        try:
            if self.ledger is not None:
                self.ledger.record(row)
            if self.metrics is not None:
                self.metrics.observe(row)
        except Exception:  # the edge: a metric that cannot be counted is only logged
            log.exception("recording a request failed")
        finally:
            self.unfinished -= 1

    def _measure(self, row: LedgerRow, data: dict[str, Any], rewrite: Rewrite | None,
                 usage: Answer) -> None:
        """Context metrics and the bill estimate (the finishing thread)."""
        try:
            messages = rewrite.result.ctx.messages if rewrite is not None else data["messages"]
            row.utilization = utilization(data_segments(messages), usage.text)
            injected = row.context.get("injected")
            if row.oscillation is None and isinstance(injected, list) and injected:
                row.oscillation = self.oscillation.observe(row.session, map(str, injected))
            memory = data_segments(m for m in messages if text_of(m).startswith(MEMORY_HEADER))
            if memory and usage.text:
                row.context["retrieval_hit"] = bool(utilization(memory, usage.text))
            row.tool_retries = tool_retries(data["messages"])
        except Exception:  # the edge: metrics never lose the ledger row
            log.exception("finishing a request failed")
        try:
            self.bill.observe(row, data, rewrite, usage.notes)
        except Exception:  # the edge: the estimate never loses the ledger row
            log.exception("estimating the bill failed")

    async def drain(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109 (called from sync shutdown code too)
        """Wait for the finishing tasks (at most ``timeout`` s); False if some are left."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while self.pending:
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                return False
            await asyncio.wait(list(self.pending), timeout=left)
        return True

    async def stop(self, wait: float, then: float) -> None:
        """Shutting down: wait ``wait`` s for the rows being finished, and for requests
        begun whose row is not scheduled yet (a request the server just cut schedules it
        as its cancellation unwinds), then cancel what is left (shadow rewrites: their rows
        are recorded without) and wait ``then`` s more."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while self.unfinished > 0 and not self.pending and loop.time() < deadline:
            self._scheduled.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._scheduled.wait(), deadline - loop.time())
        if await self.drain(max(0.0, deadline - loop.time())):
            return
        for task in list(self.pending):
            task.cancel()
        if not await self.drain(then):
            log.warning("shutdown: %d ledger rows were not finished", len(self.pending))

    def close(self) -> None:
        self._worker.shutdown(wait=True)
        self.engine.close()


async def _shadow_rewrite(engine: Engine, data: dict[str, Any], session: str) -> Rewrite | None:
    try:
        return await engine.rewrite_in_background(data, session)  # None: background lane full
    except Exception:  # the edge: a failed shadow rewrite is recorded as failed open
        log.exception("shadow rewrite failed")
        return None
