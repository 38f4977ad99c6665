"""The ledger's writer thread: rows from a bounded queue into the database, each on its own.

The request path only calls ``record`` (never blocks: a full queue drops and counts). The
thread inserts in batches; a batch that fails is tried row by row, a row ``RETRIES``
times, then it is dropped and counted (the database refused that row). A lost
connection (a restart, an outage) loses no row: the rows not yet written stay with the
writer, which reconnects with backoff (``RETRY_PAUSE`` doubling up to ``MAX_PAUSE``)
for as long as it takes, while new rows wait in the queue until it is full. ``health``
says ``failing`` once the oldest row waiting is ``stale_after`` seconds old, so a
writer stuck on a half-open connection shows, not only one whose writes fail. The database is a ``Backend`` (SQLite in
``proxy/recording/ledger.py``, PostgreSQL in ``proxy/recording/ledger_pg.py``). It deletes rows
older than ``retention_days`` at start-up and every ``prune_every`` seconds, and exits
on ``close()`` after draining. ``flush(timeout)`` waits at most ``timeout``;
``health()`` says whether the thread is alive and writing.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any, Protocol

log = logging.getLogger("context_engine.ledger")

TABLE = "requests"
MAX_QUEUE = 10_000  # rows waiting for the writer; beyond it rows are dropped and counted
BATCH = 500
RETRIES = 3
RETRY_PAUSE = 0.05  # seconds, doubled on each retry
MAX_PAUSE = 2.0  # longest pause between reconnects
CLOSE_GRACE = 5.0  # seconds ``close`` keeps reconnecting before it counts unwritten rows lost
STALE_AFTER = 10.0  # seconds a row may wait before health says the writer is failing


class Backend(Protocol):
    """One database for the writer: every call runs on the writer thread."""

    url: str

    def connect(self) -> Any: ...

    def insert(self, conn: Any, params: list[dict[str, Any]]) -> None:
        """Insert the rows in one transaction (all or none)."""

    def prune(self, conn: Any, cutoff: float) -> int:
        """Delete rows older than ``cutoff``; returns how many."""

    def broken(self, conn: Any) -> bool:
        """True when ``conn`` itself is lost (reconnect), not just the statement failed."""


class RowWriter:
    """The request path only queues; the writer thread is the only one that writes.

    Each row is stored on its own merit: values SQLite cannot take are cleaned first, a
    batch that fails is retried row by row, and a row that still fails after ``RETRIES``
    attempts is dropped and counted. Nothing a row holds can stop the writer.
    """

    def __init__(self, backend: Backend, retention_days: float = 0.0, prune_every: float = 3600.0,
                 max_queue: int = MAX_QUEUE, stale_after: float = STALE_AFTER) -> None:
        self.backend, self.path = backend, backend.url
        self.retention_days = retention_days
        self.prune_every = prune_every
        self.stale_after = stale_after
        self._pending: list[dict[str, Any]] = []  # taken from the queue, not written yet
        self._pending_since: float | None = None  # when the oldest of them was queued
        self._close_by = 0.0
        backend.connect().close()  # fail at start-up, not on the first request
        self.written = self.dropped = self.failed_attempts = self.pruned = 0
        self.last_error = ""
        self.failing = False  # the writer's last attempt failed
        self._lock = threading.Lock()
        self._closed = False
        self._queue: queue.Queue[Any] = queue.Queue(max_queue)
        self._thread = threading.Thread(target=self._run, name="ledger-writer", daemon=True)
        self._thread.start()

    def record(self, row: Any) -> None:
        try:
            self._queue.put_nowait((time.monotonic(), row))
        except queue.Full:
            self._drop(1, "queue full")

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait (at most ``timeout`` s) until every row queued so far is written or dropped."""
        if not self._thread.is_alive():
            return False
        done, deadline = threading.Event(), time.monotonic() + timeout
        try:
            self._queue.put(done, timeout=timeout)
        except queue.Full:
            return False
        return done.wait(max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        self._close_by = time.monotonic() + CLOSE_GRACE
        self._closed = True
        if self._thread.is_alive():
            try:
                self._queue.put(None, timeout=10)
            except queue.Full:
                log.error("ledger: queue still full at close; %d rows lost", self._queue.qsize())
            self._thread.join(timeout=10)

    def oldest_wait(self) -> float:
        """Seconds the oldest row not yet written has waited (0: none waits)."""
        since = self._pending_since
        with self._queue.mutex:
            head = next((item[0] for item in self._queue.queue if isinstance(item, tuple)), None)
        times = [t for t in (since, head) if t is not None]
        return max(0.0, time.monotonic() - min(times)) if times else 0.0

    def health(self) -> dict[str, Any]:
        state, waited = "ok", self.oldest_wait()
        if not self._thread.is_alive() and not self._closed:
            state = "dead"
        elif self.failing or waited > self.stale_after:
            state = "failing"
        error = self.last_error
        if waited > self.stale_after and not self.failing:
            error = f"the oldest row has waited {waited:.0f} s (writer blocked?)"
        return {"state": state, "written": self.written, "dropped": self.dropped,
                "queued": self._queue.qsize() + len(self._pending), "oldest_s": round(waited, 3),
                "failed_attempts": self.failed_attempts, "last_error": error}

    def _drop(self, n: int, why: str) -> None:
        with self._lock:
            self.dropped += n
            self.last_error = why[:300]
            first_of_a_thousand = self.dropped % 1000 < n
        if first_of_a_thousand:  # a flood of drops logs once per thousand
            log.error("ledger: %d row(s) dropped (%d in all): %s", n, self.dropped, why)

    def _run(self) -> None:
        conn: Any = None
        next_prune = 0.0
        try:
            while True:
                if self.retention_days > 0 and time.time() >= next_prune:
                    conn = self._guarded(self._prune, conn)
                    next_prune = time.time() + self.prune_every
                try:
                    item = self._queue.get(timeout=self.prune_every)
                except queue.Empty:
                    continue
                batch, events, stop = self._take(item)
                if batch:
                    conn = self._store(conn, batch)
                for ev in events:
                    ev.set()
                if stop:
                    return
        finally:
            if conn is not None:
                conn.close()

    def _take(self, item: Any) -> tuple[list[Any], list[threading.Event], bool]:
        batch: list[Any] = []
        events: list[threading.Event] = []
        stop = False
        while True:
            if item is None:
                stop = True
            elif isinstance(item, threading.Event):
                events.append(item)
            else:
                queued, row = item
                if not batch:
                    self._pending_since = queued
                batch.append(row)
            if stop or len(batch) >= BATCH:
                return batch, events, stop
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return batch, events, stop

    def _guarded(self, work: Any, conn: Any) -> Any:
        """Run ``work(conn)`` (connecting first if needed); the writer survives any failure."""
        try:
            conn = conn or self.backend.connect()
            work(conn)
            return conn
        except Exception as exc:  # the edge: the writer thread must outlive any one failure
            if self.failing:  # still failing (an outage, retried with backoff): one line
                log.warning("ledger writer: still failing: %s", str(exc).splitlines()[0][:200])
            else:
                log.exception("ledger writer: %s", exc)
            with self._lock:
                self.last_error = repr(exc)[:300]
            if conn is not None:
                conn.close()
            return None

    def _store(self, conn: Any, batch: list[Any]) -> Any:
        """Write ``batch``, reconnecting with backoff while the connection is the problem
        (until ``close``); rows written before a connection was lost are not written again."""
        params = self._pending
        for row in batch:
            try:
                params.append(row.as_params())
            except Exception as exc:  # the edge: one unreadable row costs only itself
                self._drop(1, f"unreadable row: {exc!r}")
        pause = RETRY_PAUSE
        try:
            while True:
                conn = self._guarded(lambda c: self._write(c, params), conn)
                if conn is not None:
                    return conn
                self.failing = True
                if self._closed and time.monotonic() > self._close_by:  # unwritten rows are counted
                    self._drop(len(params), f"no connection to the ledger at close: {self.last_error}")
                    return None
                time.sleep(pause)
                pause = min(MAX_PAUSE, pause * 2)
        finally:
            params.clear()
            self._pending_since = None

    def _write(self, conn: Any, params: list[dict[str, Any]]) -> None:
        """Write ``params`` (rows leave the list as they are written); raises only when
        the connection is lost."""
        try:
            self.backend.insert(conn, params)
            self._wrote(len(params))
            params.clear()
            return
        except Exception as exc:  # the edge: the rows are tried one by one below
            if self.backend.broken(conn):
                raise
            self.failing = True
            log.warning("ledger: batch of %d failed (%r); writing row by row", len(params), exc)
        while params:
            self._write_one(conn, params[0])
            params.pop(0)

    def _write_one(self, conn: Any, params: dict[str, Any]) -> None:
        error: Exception | None = None
        for attempt in range(RETRIES):
            try:
                self.backend.insert(conn, [params])
                self._wrote(1)
                return
            except Exception as exc:  # the edge: retried, then dropped and counted
                if self.backend.broken(conn):
                    raise
                error, self.failing = exc, True
                with self._lock:
                    self.failed_attempts += 1
                time.sleep(RETRY_PAUSE * 2 ** attempt)
        self._drop(1, f"write failed {RETRIES} times: {error!r}")

    def _wrote(self, n: int) -> None:
        with self._lock:
            self.written += n
        self.failing = False

    def _prune(self, conn: Any) -> None:
        deleted = self.backend.prune(conn, time.time() - self.retention_days * 86400)
        self.pruned += deleted
        if deleted:
            log.info("ledger: deleted %d rows older than %g days", deleted, self.retention_days)
