"""The ledger: one SQLite row per request, written off the request path.

The request path only puts a row on a queue; one writer thread owns the connection,
inserts in batches (WAL mode, synchronous=NORMAL) and exits on ``close()`` after
draining. ``flush()`` waits until everything queued so far is written.
"""

from __future__ import annotations

import json
import os
import queue
import sqlite3
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

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
        d["rule_savings"] = json.dumps(self.rule_savings, sort_keys=True)
        d["journal"] = json.dumps(self.journal, ensure_ascii=False)
        d["context"] = json.dumps(self.context, ensure_ascii=False, sort_keys=True)
        return d


COLUMNS = list(LedgerRow.__dataclass_fields__)


def connect(path: str) -> sqlite3.Connection:
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    conn = sqlite3.connect(path, check_same_thread=False)
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
    def __init__(self, path: str) -> None:
        self.path = path
        connect(path).close()  # fail at start-up, not on the first request
        self._queue: queue.Queue[LedgerRow | threading.Event | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="ledger-writer", daemon=True)
        self._thread.start()

    def record(self, row: LedgerRow) -> None:
        self._queue.put(row)

    def flush(self, timeout: float = 10.0) -> None:
        done = threading.Event()
        self._queue.put(done)
        done.wait(timeout)

    def close(self) -> None:
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(timeout=10)

    def _run(self) -> None:
        conn = connect(self.path)
        sql = f"INSERT INTO requests ({', '.join(COLUMNS)}) VALUES ({', '.join(':' + c for c in COLUMNS)})"
        try:
            while True:
                item = self._queue.get()
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
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                if batch:
                    with conn:
                        conn.executemany(sql, [r.as_params() for r in batch])
                for ev in events:
                    ev.set()
                if stop:
                    return
        finally:
            conn.close()


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
