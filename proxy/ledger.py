"""The ledger: one SQLite row per request, written off the request path.

The request path only puts a row on a (bounded) queue; one writer thread owns the
connection, inserts in batches (WAL mode, synchronous=NORMAL), deletes rows older than
``retention_days`` at start-up and every ``prune_every`` seconds, and exits on ``close()``
after draining. ``flush()`` waits, for a bounded time, until everything queued so far is
written; ``health()`` says whether the writer is alive and writing.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import sqlite3
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from proxy.sanitize import clean_value

log = logging.getLogger("context_engine.ledger")

SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  ts REAL NOT NULL,
  session TEXT, model TEXT, mode TEXT, path TEXT,
  arm TEXT,
  encoding TEXT, encoding_fallback INTEGER,
  tokens_original INTEGER, tokens_sent INTEGER,
  rule_savings TEXT, journal TEXT,
  prompt_tokens INTEGER, cached_tokens INTEGER, completion_tokens INTEGER,
  status INTEGER, proxy_ms REAL, upstream_ms REAL,
  stream INTEGER, finish_reason TEXT,
  failed_open INTEGER, rule_errors INTEGER, error TEXT,
  tool_retries INTEGER, utilization REAL, oscillation REAL, context TEXT
);
"""
INDEXES = """
CREATE INDEX IF NOT EXISTS requests_ts ON requests(ts);
CREATE INDEX IF NOT EXISTS requests_session ON requests(session);
"""


@dataclass
class LedgerRow:
    session: str = ""
    model: str = ""
    mode: str = "rewrite"
    path: str = ""
    arm: str = "rewrite"
    encoding: str = ""
    encoding_fallback: bool = False
    tokens_original: int = 0
    tokens_sent: int = 0
    rule_savings: dict[str, int] = field(default_factory=dict)
    journal: list[dict[str, Any]] = field(default_factory=list)
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    status: int = 0
    proxy_ms: float = 0.0
    upstream_ms: float = 0.0
    stream: bool = False
    finish_reason: str | None = None
    failed_open: bool = False
    rule_errors: int = 0
    error: str = ""
    tool_retries: int = 0
    utilization: float | None = None
    oscillation: float | None = None
    context: dict[str, Any] = field(default_factory=dict)
    ts: float = field(default_factory=time.time)

    def as_params(self) -> dict[str, Any]:
        d = asdict(self)
        d["rule_savings"] = json.dumps(self.rule_savings, sort_keys=True, default=str)
        d["journal"] = json.dumps(self.journal, ensure_ascii=False, default=str)
        d["context"] = json.dumps(self.context, ensure_ascii=False, sort_keys=True, default=str)
        return {k: clean_value(v) for k, v in d.items()}


COLUMNS = list(LedgerRow.__dataclass_fields__)
INSERT = f"INSERT INTO requests ({', '.join(COLUMNS)}) VALUES ({', '.join(':' + c for c in COLUMNS)})"
MAX_QUEUE = 10_000  # rows waiting for the writer; beyond it rows are dropped and counted
BATCH = 500
RETRIES = 3
RETRY_PAUSE = 0.05  # seconds, doubled on each retry


def connect(path: str, busy_timeout: float = 5.0) -> sqlite3.Connection:
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    conn = sqlite3.connect(path, timeout=busy_timeout, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.executescript(SCHEMA)
    have = {r[1] for r in conn.execute("PRAGMA table_info(requests)")}
    for name in COLUMNS:  # ledgers written by an older version gain the new columns
        if name not in have:
            conn.execute(f"ALTER TABLE requests ADD COLUMN {name}")
    conn.executescript(INDEXES)
    conn.commit()
    return conn


class Ledger:
    """The request path only queues; the writer thread is the only one that writes.

    Each row is stored on its own merit: values SQLite cannot take are cleaned first, a
    batch that fails is retried row by row, and a row that still fails after ``RETRIES``
    attempts is dropped and counted. Nothing a row holds can stop the writer.
    """

    def __init__(self, path: str, retention_days: float = 0.0, prune_every: float = 3600.0,
                 max_queue: int = MAX_QUEUE, busy_timeout: float = 5.0) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self.retention_days = retention_days
        self.prune_every = prune_every
        connect(path).close()  # fail at start-up, not on the first request
        self.written = self.dropped = self.failed_attempts = self.pruned = 0
        self.last_error = ""
        self.failing = False  # the last row the writer tried was dropped
        self._lock = threading.Lock()
        self._closed = False
        self._queue: queue.Queue[LedgerRow | threading.Event | None] = queue.Queue(max_queue)
        self._thread = threading.Thread(target=self._run, name="ledger-writer", daemon=True)
        self._thread.start()

    def record(self, row: LedgerRow) -> None:
        try:
            self._queue.put_nowait(row)
        except queue.Full:
            self._drop(1, "queue full")

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait (at most ``timeout`` s) until every row queued so far is written or dropped."""
        if not self._thread.is_alive():
            return False
        done = threading.Event()
        try:
            self._queue.put(done, timeout=timeout)
        except queue.Full:
            return False
        return done.wait(timeout)

    def close(self) -> None:
        self._closed = True
        if self._thread.is_alive():
            try:
                self._queue.put(None, timeout=10)
            except queue.Full:
                log.error("ledger: queue still full at close; %d rows lost", self._queue.qsize())
            self._thread.join(timeout=10)

    def health(self) -> dict[str, Any]:
        state = "ok"
        if not self._thread.is_alive() and not self._closed:
            state = "dead"
        elif self.failing:
            state = "failing"
        return {"state": state, "written": self.written, "dropped": self.dropped,
                "failed_attempts": self.failed_attempts, "queued": self._queue.qsize(), "last_error": self.last_error}

    def _drop(self, n: int, why: str) -> None:
        with self._lock:
            self.dropped += n
            self.last_error = why[:300]
        log.error("ledger: %d row(s) dropped: %s", n, why)

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
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

    def _take(self, item: LedgerRow | threading.Event | None
              ) -> tuple[list[LedgerRow], list[threading.Event], bool]:
        batch: list[LedgerRow] = []
        events: list[threading.Event] = []
        stop = False
        while True:
            if item is None:
                stop = True
            elif isinstance(item, threading.Event):
                events.append(item)
            else:
                batch.append(item)
            if stop or len(batch) >= BATCH:
                return batch, events, stop
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return batch, events, stop

    def _guarded(self, work: Any, conn: sqlite3.Connection | None) -> sqlite3.Connection | None:
        """Run ``work(conn)`` (connecting first if needed); the writer survives any failure."""
        try:
            conn = conn or connect(self.path, self.busy_timeout)
            work(conn)
            return conn
        except Exception as exc:  # the edge: the writer thread must outlive any one failure
            log.exception("ledger writer: %s", exc)
            with self._lock:
                self.last_error = repr(exc)[:300]
            if conn is not None:
                conn.close()
            return None

    def _store(self, conn: sqlite3.Connection | None, batch: list[LedgerRow]) -> sqlite3.Connection | None:
        """Write ``batch``, reconnecting (``RETRIES`` times) if the connection is the problem."""
        for attempt in range(RETRIES):
            conn = self._guarded(lambda c: self._write(c, batch), conn)
            if conn is not None:
                return conn
            self.failing = True
            time.sleep(RETRY_PAUSE * 2 ** attempt)
        self._drop(len(batch), f"no connection to the ledger: {self.last_error}")
        return None

    def _write(self, conn: sqlite3.Connection, batch: list[LedgerRow]) -> None:
        params = []
        for row in batch:
            try:
                params.append(row.as_params())
            except Exception as exc:  # the edge: one unreadable row costs only itself
                self._drop(1, f"unreadable row: {exc!r}")
        try:
            with conn:
                conn.executemany(INSERT, params)
            self._wrote(len(params))
            return
        except Exception as exc:  # the edge: the rows are tried one by one below
            log.warning("ledger: batch of %d failed (%r); writing row by row", len(params), exc)
        for p in params:
            self._write_one(conn, p)

    def _write_one(self, conn: sqlite3.Connection, params: dict[str, Any]) -> None:
        error: Exception | None = None
        for attempt in range(RETRIES):
            try:
                with conn:
                    conn.execute(INSERT, params)
                self._wrote(1)
                return
            except Exception as exc:  # the edge: retried, then dropped and counted
                error, self.failing = exc, True
                with self._lock:
                    self.failed_attempts += 1
                time.sleep(RETRY_PAUSE * 2 ** attempt)
        self._drop(1, f"write failed {RETRIES} times: {error!r}")

    def _wrote(self, n: int) -> None:
        with self._lock:
            self.written += n
        self.failing = False

    def _prune(self, conn: sqlite3.Connection) -> None:
        cutoff = time.time() - self.retention_days * 86400
        with conn:
            deleted = conn.execute("DELETE FROM requests WHERE ts < ?", (cutoff,)).rowcount
        self.pruned += deleted
        if deleted:
            log.info("ledger: deleted %d rows older than %g days", deleted, self.retention_days)


def read_rows(path: str, since: float | None = None) -> list[dict[str, Any]]:
    """All rows (as dicts) newer than ``since`` (a UNIX time), oldest first."""
    if not os.path.exists(path):
        return []
    conn = connect(path)
    conn.row_factory = sqlite3.Row
    try:
        cur = conn.execute("SELECT * FROM requests WHERE ts >= ? ORDER BY id", (since or 0,))
        return [dict(r) for r in cur.fetchall()]
    finally:
        conn.close()
