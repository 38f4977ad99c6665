"""After the response: shadow rewrites, context metrics, the ledger row and /metrics.

The edge hands over the request's parts (``proxy/recording/row_parts.py``); the row is
assembled from them, the finisher's own (``Measured``) and the bill's, once, when recorded.

All of it runs once the response body has been sent: shadow rewrites in the rules'
background lane (so they never hold up the event loop or a request; none for a request
the upstream refused, whose rewrite must not reach the store); what grows with the
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
import dataclasses
import json
import logging
from typing import Any, Protocol

from context_engine.proxy.billing.estimate import BillEstimate, BillEstimator
from context_engine.proxy.engine.engine import Engine
from context_engine.proxy.engine.messages import MEMORY_HEADER, text_of
from context_engine.proxy.engine.pending_writes import refused
from context_engine.proxy.engine.rereads import detect
from context_engine.proxy.engine.rewrite import Rewrite
from context_engine.proxy.engine.tokens import counter_for_model
from context_engine.proxy.recording.context_metrics import (
    Oscillation,
    data_segments,
    tool_retries,
    utilization,
)
from context_engine.proxy.recording.ledger import GUARD_ARM, Ledger, LedgerRow
from context_engine.proxy.recording.row_parts import (
    Answered,
    Measured,
    Received,
    Rewritten,
    assemble,
    bill_facts,
)

log = logging.getLogger("context_engine.finish")


class Answer(Protocol):
    """What finishing reads of the response (``dialects/usage.py``'s ``Usage`` is one)."""

    @property
    def text(self) -> str: ...

    @property
    def notes(self) -> list[str]: ...


MAX_SHADOW_BACKLOG = 256  # shadow rewrites waiting for the rules thread; beyond it, skipped
MAX_MEASURE_BACKLOG = 64  # rows waiting to be measured; beyond it, recorded unmeasured
MAX_MEASURE_BYTES = 64 * 1024 * 1024  # request body bytes those rows may hold
UNMEASURED = "finish backlog full"
REFUSED = frozenset({401, 403})  # the upstream refused the caller: no reply, nothing billed


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

    def schedule(self, received: Received, rewritten: Rewritten, answered: Answered,
                 data: dict[str, Any], rewrite: Rewrite | None, usage: Answer, shadow: bool,
                 size: int = 0) -> None:
        """Finish the request's row after the response; ``size`` is its request body's length."""
        measure = self.measure_backlog < self.max_measure_backlog and \
            (self.measure_bytes == 0 or self.measure_bytes + size <= self.max_measure_bytes)
        unmeasured, skipped = "", ""
        if answered.status in REFUSED:  # nothing to measure (a keyless caller's huge body, say)
            unmeasured, measure, shadow = "refused", False, False
        if refused(answered.status):  # no rewrite of a refused request reaches the store
            shadow = False
        if (shadow and self.shadow_backlog >= self.max_shadow_backlog) or (shadow and not measure):
            self.skipped_shadow += 1
            shadow = False
            skipped = "shadow skipped: backlog full"
        self.shadow_backlog += shadow
        if measure:
            self.measure_backlog, self.measure_bytes = self.measure_backlog + 1, self.measure_bytes + size
        elif not unmeasured:  # the body is let go now; the row is recorded as it is
            self.skipped_measure += 1
            unmeasured = UNMEASURED
        noted = Measured(context={"unmeasured": unmeasured} if unmeasured else {}, error=skipped)
        task = asyncio.get_running_loop().create_task(
            self._finish(received, rewritten, answered, data, rewrite, usage, shadow, size, noted)
            if measure else self._record(self._row(received, rewritten, answered, noted)))
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)
        self._scheduled.set()

    def _row(self, received: Received, rewritten: Rewritten, answered: Answered,
             measured: Measured, bill: BillEstimate | None = None) -> LedgerRow:
        replica = self.ledger.replica if self.ledger is not None else ""
        return assemble(received, rewritten, answered, measured, bill, replica)

    async def _finish(self, received: Received, rewritten: Rewritten, answered: Answered,
                      data: dict[str, Any], rewrite: Rewrite | None, usage: Answer, shadow: bool,
                      size: int, noted: Measured) -> None:
        try:
            if shadow:
                try:
                    rewrite = await _shadow_rewrite(self.engine, data, received.session)
                except asyncio.CancelledError:  # shutting down (``stop``): the row still goes
                    rewrite = None
                    noted = dataclasses.replace(noted, error=noted.error or "shadow skipped: shutting down")
                finally:
                    self.shadow_backlog -= 1
                rewritten = Rewritten.of(rewrite, rewritten)
        except Exception:  # the edge: metrics never lose the ledger row
            log.exception("finishing a request failed")
        measured, bill = noted, None
        try:
            measured, bill = await asyncio.get_running_loop().run_in_executor(
                self._worker, self._measure, received, rewritten, answered, data, rewrite, usage, noted)
        except RuntimeError:  # the worker is shut down (closing): the row goes as it is
            log.warning("finishing thread closed; row recorded without its context metrics")
        finally:
            self.measure_backlog -= 1
            self.measure_bytes -= size
        await self._record(self._row(received, rewritten, answered, measured, bill))

    async def _record(self, row: LedgerRow) -> None:
        try:
            if self.ledger is not None:
                self.ledger.record(row)
            if self.metrics is not None:
                self.metrics.observe(row)
            self._guard(row)
        except Exception:  # the edge: a metric that cannot be counted is only logged
            log.exception("recording a request failed")
        finally:
            self.unfinished -= 1

    def _guard(self, row: LedgerRow) -> None:
        """ab.guard (``proxy/engine/ab_guard.py``): a rule it turns off is logged and noted
        in the ledger with its evidence."""
        decision = self.engine.guard.observe(row)
        if decision is None:
            return
        log.warning("ab.guard: rule %s off for new sessions: %d re-reads in %d rewritten sessions "
                    "(%.2f per session > %s)", decision["rule"], decision["rereads"],
                    decision["sessions"], decision["rereads_per_session"], decision["threshold"])
        if self.ledger is not None:
            self.ledger.record(LedgerRow(mode="ab", arm=GUARD_ARM, path="ab.guard",
                                         guard=json.dumps(decision, sort_keys=True),
                                         error=f"rule {decision['rule']} off for new sessions"))

    def _measure(self, received: Received, rewritten: Rewritten, answered: Answered,
                 data: dict[str, Any], rewrite: Rewrite | None, usage: Answer,
                 noted: Measured) -> tuple[Measured, BillEstimate | None]:
        """Context metrics and the bill estimate (the finishing thread)."""
        measured, bill = noted, None
        try:
            messages = rewrite.result.ctx.messages if rewrite is not None else data["messages"]
            measured = dataclasses.replace(measured, utilization=utilization(data_segments(messages), usage.text))
            injected = rewritten.context.get("injected")
            if rewritten.oscillation is None and isinstance(injected, list) and injected:
                measured = dataclasses.replace(
                    measured, oscillation=self.oscillation.observe(received.session, map(str, injected)))
            memory = data_segments(m for m in messages if text_of(m).startswith(MEMORY_HEADER))
            if memory and usage.text:
                measured = dataclasses.replace(measured, context={
                    **measured.context, "retrieval_hit": bool(utilization(memory, usage.text))})
            measured = dataclasses.replace(measured, tool_retries=tool_retries(data["messages"]))
        except Exception:  # the edge: metrics never lose the ledger row
            log.exception("finishing a request failed")
        try:
            measured = quality(measured, received, rewritten, answered, data, rewrite)
        except Exception:  # the edge: the signals never lose the ledger row
            log.exception("reading the behaviour signals failed")
        try:
            bill = self.bill.observe(bill_facts(received, rewritten, answered), data, rewrite, usage.notes)
        except Exception:  # the edge: the estimate never loses the ledger row
            log.exception("estimating the bill failed")
        return measured, bill

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


def quality(measured: Measured, received: Received, rewritten: Rewritten, answered: Answered,
            data: dict[str, Any], rewrite: Rewrite | None) -> Measured:
    """``measured`` with the request's behaviour signals (``proxy/engine/rereads.py``):
    re-reads count only where the rewrite went out; recall answers' tokens."""
    count = counter_for_model(received.model)[0].text
    went_out = rewrite is not None and received.arm == "rewrite" and not rewritten.failed_open
    if rewrite is not None and rewrite.result.original_messages is not None:
        original = rewrite.result.original_messages
    else:
        original = data["messages"]
    signals = detect(original, rewrite.result.ctx.messages if went_out and rewrite else None,
                     rewrite.result.journal if rewrite is not None else (), count)
    return dataclasses.replace(measured, signals=signals.columns(),
                               recall_tokens=sum(map(count, answered.recall_answers)))


async def _shadow_rewrite(engine: Engine, data: dict[str, Any], session: str) -> Rewrite | None:
    try:
        return await engine.rewrite_in_background(data, session)  # None: background lane full
    except Exception:  # the edge: a failed shadow rewrite is recorded as failed open
        log.exception("shadow rewrite failed")
        return None
