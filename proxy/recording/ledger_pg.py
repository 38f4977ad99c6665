"""The ledger in PostgreSQL (``ledger: postgresql://…``), shared by several replicas.

Driver: psycopg 3 (``pip install 'context-engine[postgres]'``). The ledger writer is one
thread with a synchronous connection (``proxy/recording/ledger_writer.py``), and ``report`` is a
synchronous command: psycopg's blocking API fits both without an event loop, its
``executemany`` sends a batch in one pipelined round trip, and its binary wheel ships
libpq. (asyncpg would need a loop in the writer thread and in ``report``.)

The table is created at start-up and gains missing columns, under an advisory lock so
replicas starting together do not race. Columns mirror ``LedgerRow``; values are stored
as SQLite stores them (booleans as 0/1, JSON as text) so every reader sees the same rows
from either ledger. PostgreSQL text cannot hold NUL: it is stored as ``\\u0000``.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

from context_engine.proxy.recording.ledger import COLUMNS, LedgerRow
from context_engine.proxy.recording.ledger_writer import TABLE
from context_engine.proxy.sanitize import redact_url

MIGRATION_LOCK = 0x6C656467  # pg_advisory_xact_lock key: one replica migrates at a time
# A dead peer (a host gone, a half-open connection) breaks the connection within seconds:
# TCP keepalives on an idle one, tcp_user_timeout (ms) under unacknowledged data.
KEEPALIVE = {"keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2,
             "keepalives_count": 3, "tcp_user_timeout": 10_000}
STATEMENT_TIMEOUT_S = 10.0  # the writer's statements; the writer's watchdog waits twice that


def _sql_type(annotation: str) -> str:
    kind = annotation.split("|")[0].strip()
    return {"int": "BIGINT", "bool": "BIGINT", "float": "DOUBLE PRECISION"}.get(kind, "TEXT")


TYPES = {name: _sql_type(str(f.type)) for name, f in LedgerRow.__dataclass_fields__.items()}
CREATE = f"CREATE TABLE IF NOT EXISTS {TABLE} (id BIGSERIAL PRIMARY KEY, ts DOUBLE PRECISION NOT NULL)"
INDEXES = (f"CREATE INDEX IF NOT EXISTS requests_ts ON {TABLE}(ts)",
           f"CREATE INDEX IF NOT EXISTS requests_session ON {TABLE}(session)")
INSERT = (f"INSERT INTO {TABLE} ({', '.join(COLUMNS)}) "
          f"VALUES ({', '.join('%(' + c + ')s' for c in COLUMNS)})")


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise ValueError("postgresql:// needs the psycopg driver: "
                         "pip install 'context-engine[postgres]'") from None
    return psycopg


def _pg_value(value: Any) -> Any:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, str) and "\x00" in value:
        return value.replace("\x00", "\\u0000")
    return value


def migrate(conn: Any) -> None:
    """Create the table, add the columns it lacks, create the indexes (one transaction)."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        conn.execute(CREATE)
        have = {r[0] for r in conn.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_name = %s AND table_schema = current_schema()", (TABLE,))}
        for name in COLUMNS:
            if name not in have:
                conn.execute(f"ALTER TABLE {TABLE} ADD COLUMN {name} {TYPES[name]}")
        for statement in INDEXES:
            conn.execute(statement)


def connect(url: str, timeout: float = 5.0, schema: bool = True) -> Any:
    """A connection (with the schema in place unless ``schema`` is false); ValueError
    naming the URL if it cannot."""
    psycopg = _psycopg()
    try:
        conn = psycopg.connect(url, connect_timeout=max(1, int(timeout)), autocommit=True, **KEEPALIVE)
    except psycopg.Error as exc:
        raise ValueError(f"cannot connect to {redact_url(url)}: {str(exc).strip()}") from None
    if not schema:
        return conn
    try:
        migrate(conn)
    except psycopg.Error as exc:
        conn.close()
        raise ValueError(f"cannot prepare the ledger table at {redact_url(url)}: {str(exc).strip()}") from None
    return conn


class PostgresBackend:
    """See ``ledger_writer.Backend``; the first ``connect`` runs at start-up."""

    def __init__(self, url: str, timeout: float = 5.0) -> None:
        self.url, self.timeout = url, timeout

    def connect(self) -> Any:
        conn = connect(self.url, self.timeout)
        conn.execute("SELECT set_config('statement_timeout', %s, false)",
                     (f"{int(STATEMENT_TIMEOUT_S * 1000)}ms",))
        return conn

    def insert(self, conn: Any, params: list[dict[str, Any]]) -> None:
        """One transaction. A connection problem (an outage, a statement past its timeout)
        closes the connection, so the writer reconnects and keeps the rows; a watchdog
        shuts the socket if the server stops answering (``STATEMENT_TIMEOUT_S`` × 2)."""
        psycopg = _psycopg()
        rows = [{k: _pg_value(v) for k, v in p.items()} for p in params]
        watchdog = threading.Timer(2 * STATEMENT_TIMEOUT_S, _shut, (conn,))
        watchdog.daemon = True
        watchdog.start()
        try:
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany(INSERT, rows)
        except psycopg.OperationalError:
            conn.close()
            raise
        finally:
            watchdog.cancel()

    def prune(self, conn: Any, cutoff: float) -> int:
        with conn.transaction():
            return int(conn.execute(f"DELETE FROM {TABLE} WHERE ts < %s", (cutoff,)).rowcount)

    def broken(self, conn: Any) -> bool:
        return bool(conn.closed or conn.broken)


def _shut(conn: Any) -> None:
    """Unblock a statement waiting on a silent server: shut the connection's socket."""
    try:
        fd = conn.pgconn.socket
        with socket.fromfd(fd, socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except (OSError, ValueError, AttributeError):  # already closed
        pass


def read_rows(url: str, since: float | None = None, notes: bool = False) -> list[dict[str, Any]]:
    """All request rows (as dicts, like SQLite's) newer than ``since``, in the order
    written, or with ``notes`` the note rows (``ab.guard``); none before a server has
    created the table."""
    from psycopg.errors import UndefinedTable
    from psycopg.rows import dict_row

    with connect(url, schema=False) as conn, conn.cursor(row_factory=dict_row) as cur:
        try:
            which = "arm = %s" if notes else "(arm IS NULL OR arm <> %s)"
            cur.execute(f"SELECT * FROM {TABLE} WHERE ts >= %s AND {which} ORDER BY id",
                        (since or 0, "guard"))
        except UndefinedTable:
            return []
        return [dict(r) for r in cur.fetchall()]
