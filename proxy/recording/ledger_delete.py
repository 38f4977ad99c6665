"""Deleting ledger rows on request (``context-engine purge``), SQLite or PostgreSQL.

SQLite deletes with ``secure_delete`` (the rows' bytes are overwritten) and truncates
the WAL after, so the file keeps no copy; PostgreSQL frees the rows' space at its next
VACUUM (until then the bytes remain in the table's files, readable only by the server).

A row carries its session id, agent and project tags, but no caller scope of its own: a
scope's rows are those of its sessions, found two ways: an ``X-Session-Id`` session ends
in ``~<scope>``, and a derived session (``s-…``) is named by the store's scope index
(``proxy/reporting/purge.py``) for as long as the store still holds something it wrote.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from context_engine.proxy.recording.ledger import connect as sqlite_connect
from context_engine.proxy.recording.ledger import ledger_kind, sqlite_path
from context_engine.proxy.recording.ledger_writer import TABLE

SCOPE = re.compile(r"[0-9a-f]{64}")
CHUNK = 500  # session ids per statement


@dataclass(frozen=True)
class RowFilter:
    """Rows to delete: any session listed, any row of ``scope`` (its ``scope`` column, and
    its header ids for rows written before that column),
    the ``project`` folder, the ``agent`` tag (each condition adds rows)."""

    sessions: tuple[str, ...] = ()
    scope: str = ""
    project: str = ""
    agent: str = ""

    def clauses(self, mark: str) -> list[tuple[str, list[Any]]]:
        """``(where, args)`` pairs with ``mark`` as the placeholder (``?`` or ``%s``)."""
        out: list[tuple[str, list[Any]]] = []
        ids = list(dict.fromkeys(self.sessions))
        for i in range(0, len(ids), CHUNK):
            part = ids[i:i + CHUNK]
            out.append((f"session IN ({', '.join([mark] * len(part))})", part))
        if self.scope:
            if not SCOPE.fullmatch(self.scope):
                raise ValueError("a caller scope is 64 lowercase hex digits")
            out.append((f"session LIKE {mark}", ["%~" + self.scope]))
            out.append((f"scope = {mark}", [self.scope]))  # derived ids too (rows since it was recorded)
        if self.project:
            out.append((f"project = {mark}", [self.project]))
        if self.agent:
            out.append((f"agent = {mark}", [self.agent]))
        return out


def delete_rows(url: str, rows: RowFilter) -> int:
    """Delete the rows ``rows`` selects from the ledger at ``url``; how many went."""
    if ledger_kind(url) == "postgresql":
        from context_engine.proxy.recording.ledger_pg import connect as pg_connect

        conn = pg_connect(url)
        try:
            with conn.transaction():
                return sum(int(conn.execute(f"DELETE FROM {TABLE} WHERE {where}", args).rowcount)
                           for where, args in rows.clauses("%s"))
        finally:
            conn.close()
    conn = sqlite_connect(sqlite_path(url))
    try:
        conn.execute("PRAGMA secure_delete=ON")  # deleted rows are overwritten, not left in free pages
        with conn:
            deleted = sum(int(conn.execute(f"DELETE FROM {TABLE} WHERE {where}", args).rowcount)
                          for where, args in rows.clauses("?"))
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # and the WAL no longer holds them
        return deleted
    finally:
        conn.close()
