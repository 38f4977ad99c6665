"""Where rule work runs: a request lane (threads, one session at a time in order) and a
background lane (one low-priority thread for work that only prepares later requests).

- ``RequestLane``: ``workers`` threads (default: the cores). The rewrites of one session
  run one after the other, in arrival order; different sessions run in parallel (numpy's
  BLAS, faiss and the Rust tokenizer release the GIL). At most ``max_queued`` rewrites
  wait or run: past that ``submit`` returns None and the caller forwards the original.
  Callers (API keys; every keyless request is one caller) share it fairly: one holds at
  most half the queue, and a free worker takes the next caller in turn, so a flood from
  one key neither fills the queue nor pins the workers.
- ``BackgroundLane``: one thread at the lowest CPU priority (nice 19 on Linux) for
  prefetching and shadow rewrites. Its queue holds at most ``max_queued`` jobs; a job
  that does not fit is dropped and counted. Long jobs call ``pause()`` between steps: it
  waits (up to ``PAUSE_S``) while a request rewrite runs, so a request never waits
  behind more than one step of background work.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import queue
import threading
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from typing import Any

log = logging.getLogger("context_engine.lanes")
PAUSE_S = 0.1  # longest a background step waits for the request lane to go idle


def observe(future: asyncio.Future[Any]) -> None:
    """Retrieve the outcome of a rewrite nobody waits for any more (past the deadline)."""
    if not future.cancelled():
        future.exception()


class LaneClosed(Exception):
    """Raised by ``BackgroundLane.pause`` once the lane is closing: the job stops there."""


class Job:
    """One queued rewrite; ``abandon`` skips it if it has not started (its caller gave up)."""

    def __init__(self, fn: Callable[[], Any], caller: str = "") -> None:
        self.fn = fn
        self.caller = caller
        self.future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.abandoned = False

    def abandon(self) -> None:
        self.abandoned = True


class RequestLane:
    def __init__(self, workers: int, max_queued: int) -> None:
        self.workers = max(1, workers)
        self.max_queued = max(1, max_queued)
        self.share = max(1, self.max_queued // 2)  # most jobs one caller may hold
        self._cv = threading.Condition(threading.Lock())
        self._threads: list[threading.Thread] = []
        # runnable jobs per caller; the dict's order is the callers' turn (round robin)
        self._ready: OrderedDict[str, deque[tuple[str, Job]]] = OrderedDict()
        self._tails: dict[str, Job] = {}  # session → its newest job (only sessions with work)
        self._jobs: set[Job] = set()  # every job waiting or running (at most max_queued)
        self._held: Counter[str] = Counter()  # jobs waiting or running per caller
        self._closed = False
        self.queued = 0  # waiting or running
        self.running = 0
        self.shed = 0  # refused: the lane was full, or the caller held its share

    def submit(self, session: str, fn: Callable[[], Any], caller: str = "") -> Job | None:
        """Queue ``fn`` behind the session's earlier jobs; None when the lane is full or
        ``caller`` (its API key's scope) already holds ``share`` jobs."""
        job = Job(fn, caller)
        with self._cv:
            if self._closed:  # shutting down: skipped at once
                job.abandon()
                job.future.set_result(None)
                return job
            if self.queued >= self.max_queued or self._held[caller] >= self.share:
                self.shed += 1
                return None
            self.queued += 1
            self._held[caller] += 1
            prev = self._tails.get(session)
            self._tails[session] = job
            self._jobs.add(job)
            if not self._threads:
                self._threads = [threading.Thread(target=self._work, name=f"rules-{i}", daemon=True)
                                 for i in range(self.workers)]
                for t in self._threads:
                    t.start()
        if prev is None:
            self._ready_put(session, job)
        else:
            prev.future.add_done_callback(lambda _: self._ready_put(session, job))
        return job

    def _ready_put(self, session: str, job: Job) -> None:
        with self._cv:
            self._ready.setdefault(job.caller, deque()).append((session, job))
            self._cv.notify_all()

    def _work(self) -> None:
        """One worker: the next caller in turn gives its oldest runnable job."""
        while True:
            with self._cv:
                self._cv.wait_for(lambda: bool(self._ready) or (self._closed and not self.queued))
                if not self._ready:
                    return
                caller, jobs = next(iter(self._ready.items()))
                session, job = jobs.popleft()
                del self._ready[caller]
                if jobs:
                    self._ready[caller] = jobs  # back of the line
                self.running += 1
            self._run(session, job)

    def _run(self, session: str, job: Job) -> None:
        try:
            if not job.abandoned:
                job.future.set_result(job.fn())
            else:
                job.future.set_result(None)
        except BaseException as exc:  # handed to the awaiting request
            job.future.set_exception(exc)
        finally:
            with self._cv:
                self.running -= 1
                self.queued -= 1
                self._held[job.caller] -= 1
                if not self._held[job.caller]:
                    del self._held[job.caller]
                self._jobs.discard(job)
                if self._tails.get(session) is job:
                    del self._tails[session]
                self._cv.notify_all()

    def wait_idle(self, timeout: float) -> None:
        """Block until no rewrite runs, or ``timeout`` seconds (background steps call it)."""
        with self._cv:
            if self.running:
                self._cv.wait_for(lambda: self.running == 0, timeout)

    def close(self) -> None:
        """Skip every job that has not started; wait for the running ones."""
        with self._cv:
            self._closed = True
            for job in self._jobs:
                job.abandon()
            self._cv.notify_all()
            threads = list(self._threads)
        for t in threads:
            t.join()


class BackgroundLane:
    def __init__(self, max_queued: int, requests: RequestLane | None = None,
                 pause_s: float = PAUSE_S) -> None:
        self.requests = requests
        self.pause_s = pause_s
        self.max_queued = max(1, max_queued)
        self._queue: queue.SimpleQueue[Callable[[], Any] | None] = queue.SimpleQueue()
        self._cv = threading.Condition()
        self._thread: threading.Thread | None = None
        self.pending = 0  # queued or running
        self.closing = False
        self.dropped = 0
        self.done = 0

    def submit(self, fn: Callable[[], Any]) -> bool:
        """Queue ``fn``; False (and counted) when the queue is full."""
        with self._cv:
            if self.pending >= self.max_queued:
                self.dropped += 1
                return False
            self.pending += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="rules-background",
                                                daemon=True)
                self._thread.start()
        self._queue.put(fn)
        return True

    def pause(self) -> None:
        """Called by a background job between steps: give way to running requests.
        Raises ``LaneClosed`` once the lane is closing (the job ends there)."""
        if self.closing:
            raise LaneClosed()
        if self.requests is not None:
            self.requests.wait_idle(self.pause_s)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until every queued job has run (tests and the bench call it)."""
        with self._cv:
            return self._cv.wait_for(lambda: self.pending == 0, timeout)

    def _loop(self) -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except (AttributeError, OSError):  # not Linux, or not allowed: cooperative pauses only
            pass
        while True:
            fn = self._queue.get()
            if fn is None:
                return
            try:
                if not self.closing:
                    fn()
            except LaneClosed:
                pass
            except Exception:  # background work is an optimisation, never fatal
                log.exception("background job failed")
            finally:
                with self._cv:
                    self.pending -= 1
                    self.done += 1
                    self._cv.notify_all()

    def close(self) -> None:
        """Run no more queued jobs; the running one stops at its next ``pause``."""
        with self._cv:
            self.closing = True
            thread = self._thread
        if thread is not None:
            self._queue.put(None)
            thread.join()


_BLAS_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
                 "openblas_set_num_threads64_", "openblas_set_num_threads")


def limit_blas_threads(n: int) -> bool:
    """Cap numpy's OpenBLAS threads (the server runs sessions in parallel instead: BLAS
    threads on top of them oversubscribe the cores, and under load a MiniLM batch took
    8x longer). True when the bundled OpenBLAS was found and set."""
    import ctypes
    import glob

    import numpy as np

    folder = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    for path in sorted(glob.glob(os.path.join(folder, "*openblas*"))):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in _BLAS_SETTERS:
            setter = getattr(lib, name, None)
            if setter is not None:
                setter(ctypes.c_int(n))
                return True
    return False
