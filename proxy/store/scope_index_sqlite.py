"""The scope index of a diskcache store, in ``scopes.db`` beside the cache's own files.

One row per key (its scope, session, size, last use, expiry) and a running byte total
per scope, both in SQLite, so the account survives restarts and is shared by every
process that opens the same store folder. diskcache's own expiry and its global size
limit may delete a key without telling the index: such a row is dropped when its key's
expiry passes, or when the scope's eviction reaches it (deleting an absent key is a
no-op), so the account can only over-count, and only ever evicts its own scope's keys.
"""

from __future__ import annotations

import os
import sqlite3
import threading

from context_engine.proxy.store.files import private_file, tighten_sidecars
from context_engine.proxy.store.scopes import Writer

SCHEMA = """
CREATE TABLE IF NOT EXISTS keys (key TEXT PRIMARY KEY, scope TEXT NOT NULL, session TEXT NOT NULL,
  bytes INTEGER NOT NULL, used REAL NOT NULL, expires REAL NOT NULL);
CREATE INDEX IF NOT EXISTS keys_scope_used ON keys(scope, used);
CREATE INDEX IF NOT EXISTS keys_session ON keys(session);
CREATE INDEX IF NOT EXISTS keys_expires ON keys(expires) WHERE expires > 0;
CREATE TABLE IF NOT EXISTS totals (scope TEXT PRIMARY KEY, bytes INTEGER NOT NULL);
"""
NAME = "scopes.db"


class SqliteIndex:
    """See ``scopes.ScopeIndex``; one connection, serialised by a lock."""

    def __init__(self, folder: str, busy_timeout: float = 5.0) -> None:
        self.path = os.path.join(folder, NAME)
        private_file(self.path)
        self._conn = sqlite3.connect(self.path, timeout=busy_timeout, check_same_thread=False,
                                     isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.executescript(SCHEMA)
        tighten_sidecars(self.path)
        self._lock = threading.Lock()

    def _remove(self, keys: list[str]) -> None:
        for key in keys:
            row = self._conn.execute("SELECT scope, bytes FROM keys WHERE key = ?", (key,)).fetchone()
            if row is not None:
                self._conn.execute("DELETE FROM keys WHERE key = ?", (key,))
                self._conn.execute("UPDATE totals SET bytes = bytes - ? WHERE scope = ?", (row[1], row[0]))

    def add(self, key: str, writer: Writer, size: int, now: float, expires: float) -> None:
        with self._lock, self._conn:
            self._conn.execute("BEGIN IMMEDIATE")
            self._remove([key])
            self._conn.execute("INSERT INTO keys VALUES (?, ?, ?, ?, ?, ?)",
                               (key, writer.scope, writer.session, size, now, expires))
            self._conn.execute("INSERT INTO totals VALUES (?, ?) ON CONFLICT(scope) "
                               "DO UPDATE SET bytes = bytes + excluded.bytes", (writer.scope, size))

    def touch(self, keys: list[str], now: float, expires: float) -> None:
        with self._lock, self._conn:
            self._conn.execute("BEGIN IMMEDIATE")
            self._conn.executemany("UPDATE keys SET used = ?, expires = CASE WHEN expires > 0 "
                                   "THEN ? ELSE 0 END WHERE key = ?",
                                   [(now, expires, k) for k in keys])

    def remove(self, keys: list[str]) -> None:
        if not keys:
            return
        with self._lock, self._conn:
            self._conn.execute("BEGIN IMMEDIATE")
            self._remove(keys)

    def scope_bytes(self, scope: str, now: float) -> int:
        with self._lock:
            row = self._conn.execute("SELECT bytes FROM totals WHERE scope = ?", (scope,)).fetchone()
        return int(row[0]) if row else 0

    def oldest(self, scope: str, limit: int) -> list[tuple[str, int]]:
        with self._lock:
            rows = self._conn.execute("SELECT key, bytes FROM keys WHERE scope = ? ORDER BY used LIMIT ?",
                                      (scope, limit)).fetchall()
        return [(str(k), int(b)) for k, b in rows]

    def keys_of(self, scope: str | None = None, session: str | None = None) -> list[str]:
        where, args = [], []
        if scope is not None:
            where.append("scope = ?")
            args.append(scope)
        if session is not None:
            where.append("session = ?")
            args.append(session)
        sql = "SELECT key FROM keys" + (" WHERE " + " AND ".join(where) if where else "")
        with self._lock:
            return [str(r[0]) for r in self._conn.execute(sql, args)]

    def sessions_of(self, scope: str) -> list[str]:
        with self._lock:
            rows = self._conn.execute("SELECT DISTINCT session FROM keys WHERE scope = ? AND session != ''",
                                      (scope,)).fetchall()
        return sorted(str(r[0]) for r in rows)

    def expired(self, now: float) -> list[str]:
        with self._lock:
            rows = self._conn.execute("SELECT key FROM keys WHERE expires > 0 AND expires <= ?",
                                      (now,)).fetchall()
        return [str(r[0]) for r in rows]

    def drop_scope(self, scope: str) -> None:
        with self._lock, self._conn:
            self._conn.execute("BEGIN IMMEDIATE")
            self._remove([str(r[0]) for r in self._conn.execute("SELECT key FROM keys WHERE scope = ?",
                                                                (scope,)).fetchall()])
            self._conn.execute("DELETE FROM totals WHERE scope = ?", (scope,))

    def close(self) -> None:
        with self._lock:
            self._conn.close()
