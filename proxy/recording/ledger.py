"""The ledger: one row per request, written off the request path.

``ledger:`` is a SQLite file path (the embedded default) or a ``postgresql://`` URL
(``proxy/recording/ledger_pg.py``, shared by replicas); any other ``scheme://`` is refused at
start-up. The request path only puts a row on a bounded queue; one writer thread
(``proxy/recording/ledger_writer.py``) owns the connection (SQLite: WAL mode, synchronous=NORMAL).
Ledgers written by an older version gain the new columns when opened.

A SQLite ledger is created 0600 in a 0700 folder the proxy makes (``-wal``/``-shm``
follow the file's mode); one found looser is tightened (``proxy/store/files.py``). The
``path`` column is clipped to ``MAX_PATH`` characters, like ``agent``/``project`` at the
edge, so a client cannot make one row megabytes long.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import socket
import sqlite3
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from context_engine.proxy.recording.ledger_writer import TABLE, RowWriter
from context_engine.proxy.sanitize import clean_value
from context_engine.proxy.store.files import private_dir, private_file, tighten_sidecars

MAX_PATH = 2048  # characters of a request's URL path kept in the ledger

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


@dataclass(frozen=True)
class LedgerRow:
    """One request's row, built once (``proxy/recording/row_parts.py``'s ``assemble``)."""

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
    # the honest bill (proxy/billing/estimate.py): billed cache writes, the counterfactual
    # cache use of the original request, prefix diagnostics, bad cache input
    billing: str = ""
    est_cached_original: int | None = None
    est_write_original: int | None = None
    est_cached_sent: int | None = None
    prefix_kept_tokens: int | None = None
    prefix_break_index: int | None = None
    prefix_break_rule: str = ""
    provider_missed_tokens: int = 0
    cache_notes: str = ""
    ts: float = field(default_factory=time.time)
    api: str = "chat"  # the dialect's name: chat | responses | anthropic | gemini (the wire format)
    cache_write_tokens: int | None = None  # Anthropic cache_creation_input_tokens
    replica: str = ""  # the process that served it (``replica`` setting; several share a ledger)
    traceparent: str = ""  # the client's W3C trace context, if it sent one: its span's parent
    recall_rounds: int = 0  # follow-up upstream calls made to answer context_recall
    recall_prompt_tokens: int = 0  # their input tokens (billed: the cost of recall)
    recall_completion_tokens: int = 0  # their output tokens
    agent: str = ""  # the client's tags (proxy/edge/tags.py): which agent, which project folder
    project: str = ""
    scope: str = ""  # the caller scope: an HMAC of its credentials (purge --key), never a key
    # behaviour signals (proxy/engine/rereads.py, docs/quality.md): repeat reads of results the
    # proxy cleared or shortened (by rule: [count, tokens]) and of results sent whole (base rate)
    rereads: int = 0
    reread_tokens: int = 0
    reread_turns: int = 0  # assistant turns between each re-read and the read it repeats, summed
    reread_rules: dict[str, list[int]] = field(default_factory=dict)
    repeat_reads: int = 0
    repeat_read_tokens: int = 0
    format_errors: int = 0  # newest tool results reading like a tool-call format error
    user_turn: bool = False  # the request opens a task (its newest message is the user's)
    recall_calls: int = 0  # context_recall calls the recall loop answered (or refused)
    recall_tokens: int = 0  # tokens the recall answers brought back
    rewrite_error: bool = False  # a 4xx on a request the proxy changed
    guard: str = ""  # an ab.guard decision (a note row: arm ``guard``), JSON

    def as_params(self) -> dict[str, Any]:
        d = asdict(self)
        d["rule_savings"] = json.dumps(self.rule_savings, sort_keys=True, default=str)
        d["journal"] = json.dumps(self.journal, ensure_ascii=False, default=str)
        d["context"] = json.dumps(self.context, ensure_ascii=False, sort_keys=True, default=str)
        d["reread_rules"] = json.dumps(self.reread_rules, sort_keys=True, default=str)
        d["path"] = self.path[:MAX_PATH]
        return {k: clean_value(v) for k, v in d.items()}


COLUMNS = list(LedgerRow.__dataclass_fields__)
INSERT = f"INSERT INTO {TABLE} ({', '.join(COLUMNS)}) VALUES ({', '.join(':' + c for c in COLUMNS)})"


def connect(path: str, busy_timeout: float = 5.0) -> sqlite3.Connection:
    folder = os.path.dirname(path)
    if folder:
        private_dir(folder, tighten=False)
    if path != ":memory:":
        private_file(path)  # SQLite gives its -wal and -shm files the database file's mode
    conn = sqlite3.connect(path, timeout=busy_timeout, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    if path != ":memory:":
        tighten_sidecars(path)
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.executescript(SCHEMA)
    have = {r[1] for r in conn.execute("PRAGMA table_info(requests)")}
    for name in COLUMNS:  # ledgers written by an older version gain the new columns
        if name not in have:
            conn.execute(f"ALTER TABLE requests ADD COLUMN {name}")
    conn.executescript(INDEXES)
    conn.commit()
    return conn


POSTGRES = ("postgresql", "postgres")


def ledger_kind(url: str) -> str:
    """``sqlite`` (a path, or ``sqlite:///path``) or ``postgresql``; ValueError otherwise."""
    m = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)://", url)
    if m is None or m.group(1).lower() == "sqlite":
        return "sqlite"
    if m.group(1).lower() in POSTGRES:
        return "postgresql"
    raise ValueError(f"{m.group(1)}:// is not a ledger; use a SQLite file path or postgresql://…")




def sqlite_path(url: str) -> str:
    return url[len("sqlite://"):] if url.lower().startswith("sqlite://") else url


class SqliteBackend:
    """The embedded ledger: one SQLite file (see ``ledger_writer.Backend``)."""

    def __init__(self, url: str, busy_timeout: float = 5.0) -> None:
        self.url, self.busy_timeout = url, busy_timeout

    def connect(self) -> sqlite3.Connection:
        return connect(sqlite_path(self.url), self.busy_timeout)

    def insert(self, conn: sqlite3.Connection, params: list[dict[str, Any]]) -> None:
        with conn:
            conn.executemany(INSERT, params)

    def prune(self, conn: sqlite3.Connection, cutoff: float) -> int:
        with conn:
            return int(conn.execute(f"DELETE FROM {TABLE} WHERE ts < ?", (cutoff,)).rowcount)

    def broken(self, conn: sqlite3.Connection) -> bool:
        return False


class Ledger(RowWriter):
    """The ledger at ``path`` (a SQLite path or a postgresql:// URL): ``record(LedgerRow)``
    from the request path; see ``RowWriter``. Rows without a ``replica`` get ``replica``
    (default: this host's name)."""

    def __init__(self, path: str, retention_days: float = 0.0, busy_timeout: float = 5.0,
                 replica: str = "", **options: Any) -> None:
        self.replica = replica or socket.gethostname()
        backend: Any
        if ledger_kind(path) == "postgresql":
            from context_engine.proxy.recording.ledger_pg import PostgresBackend

            backend = PostgresBackend(path, busy_timeout)
        else:
            backend = SqliteBackend(path, busy_timeout)
        super().__init__(backend, retention_days, **options)

    def record(self, row: Any) -> None:
        if isinstance(row, LedgerRow) and not row.replica:
            row = dataclasses.replace(row, replica=self.replica)
        super().record(row)


GUARD_ARM = "guard"  # note rows: ab.guard decisions (``read_rows(notes=True)``), not requests


def read_rows(path: str, since: float | None = None, notes: bool = False) -> list[dict[str, Any]]:
    """All request rows (as dicts) newer than ``since`` (a UNIX time), oldest first;
    ``notes``: the note rows instead (``ab.guard`` decisions)."""
    if ledger_kind(path) == "postgresql":
        from context_engine.proxy.recording.ledger_pg import read_rows as read_pg

        return read_pg(path, since, notes)
    path = sqlite_path(path)
    if not os.path.exists(path):
        return []
    conn = connect(path)
    conn.row_factory = sqlite3.Row
    try:
        which = "arm = ?" if notes else "(arm IS NULL OR arm != ?)"
        cur = conn.execute(f"SELECT * FROM requests WHERE ts >= ? AND {which} ORDER BY id",
                           (since or 0, GUARD_ARM))
        return [dict(r) for r in cur.fetchall()]
    finally:
        conn.close()
