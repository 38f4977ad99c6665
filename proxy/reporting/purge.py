"""``context-engine purge``: delete a session's or a caller scope's data from the store and
the ledger (and a project's or an agent's rows from the ledger).

What the store keys are, and what finds them:

- ``orig:<id>@<scope[:32]>``: tool results a lossy rewrite shortened, per caller scope;
  found by scope (key pattern, and the scope index);
- ``compact:<session>``, ``recall:on:<session>``: per session; found by session id;
- ``retrieve:zone:<hash>``, ``sum:<hash>``, ``tool_json:learned:<tool>``: named by a hash
  (of the session and text, or of the text alone) or by the tool; found through the
  scope index (``proxy/store/scopes.py``), which records the scope and session of every
  write made during a rewrite;
- ``emb:<embedder>:<hash>``: embeddings, content-addressed and written by background
  prefetch, shared by every caller (scope ``""``): purge cannot tell whose text they came
  from and leaves them; they expire with ``store_ttl_days``. A ``sum:`` summary is
  content-addressed too: purge deletes it with the scope that wrote it first (another
  caller with the same text recomputes it).

A scope is given as its 64 hex digits (the part after ``~`` of an ``X-Session-Id``
session), or computed from the caller's credential (as the client sends it, e.g.
``Bearer sk-…``; read from ``CONTEXT_ENGINE_PURGE_KEY`` or standard input, never from
the command line) with the proxy's own HMAC (``session.caller_hash``, keyed by
``session_key``). A caller that presents several credentials at once (a client token
and an API key) has a scope of their combination: purge it by ``--scope``. A
``memory://`` store lives in the proxy's process: restart it instead.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from context_engine.proxy.engine.session import caller_hash, session_key
from context_engine.proxy.recording.ledger_delete import SCOPE, RowFilter, delete_rows
from context_engine.proxy.store.stores import open_store

KEY_ENV = "CONTEXT_ENGINE_PURGE_KEY"
SESSION_PREFIXES = ("compact:", "recall:on:")  # store keys named by the session id


@dataclass(frozen=True)
class Purge:
    sessions: tuple[str, ...] = ()
    scopes: tuple[str, ...] = ()
    project: str = ""
    agent: str = ""


@dataclass
class Purged:
    store_keys: int = 0
    ledger_rows: int = 0


def scopes_of_key(credential: str, configured_key: str, store: str) -> tuple[str, ...]:
    """The scopes a credential can have: as given, and as an ``Authorization`` header
    (``Bearer <key>``) if it was given bare."""
    key = session_key(configured_key, store)
    forms = [credential] + ([] if credential.lower().startswith("bearer ") else [f"Bearer {credential}"])
    return tuple(caller_hash({}, key, form) for form in forms)


def _store_keys(store: Any, purge: Purge) -> tuple[list[str], list[str]]:
    """(store keys to delete, sessions found for the ledger)."""
    index = store.quota.index
    keys: list[str] = []
    sessions = list(purge.sessions)
    for sid in purge.sessions:
        keys += index.keys_of(session=sid) + [p + sid for p in SESSION_PREFIXES]
    for scope in purge.scopes:
        found = index.sessions_of(scope)
        sessions += found
        keys += index.keys_of(scope=scope) + store.keys_matching(f"orig:*@{scope[:32]}")
        for prefix in SESSION_PREFIXES:
            keys += store.keys_matching(f"{prefix}*~{scope}")
        for sid in found:
            keys += [p + sid for p in SESSION_PREFIXES]
    return list(dict.fromkeys(keys)), sessions


def run_purge(settings: Any, purge: Purge) -> Purged:
    """Delete what ``purge`` names from ``settings``' store and ledger."""
    for scope in purge.scopes:
        if not SCOPE.fullmatch(scope):
            raise ValueError(f"scope {scope[:80]!r}: expected 64 lowercase hex digits")
    if not (purge.sessions or purge.scopes or purge.project or purge.agent):
        raise ValueError("name what to purge: --session, --scope, --key, --project or --agent")
    done = Purged()
    sessions = list(purge.sessions)
    if (purge.sessions or purge.scopes) and not settings.store.startswith("memory://"):
        store = open_store(settings.store, settings.store_ttl_days * 86400, settings.store_scope_bytes)
        try:
            keys, sessions = _store_keys(store, purge)
            done.store_keys = store.quota.delete_keys(store, keys)  # type: ignore[attr-defined]
            for scope in purge.scopes:
                store.quota.index.drop_scope(scope)  # type: ignore[attr-defined]
        finally:
            close = getattr(store, "close", None)
            if callable(close):
                close()
        _scrub_disk(settings.store)
    rows = RowFilter(tuple(sessions), "", purge.project, purge.agent)
    done.ledger_rows = delete_rows(settings.ledger, rows)
    for scope in purge.scopes:
        done.ledger_rows += delete_rows(settings.ledger, RowFilter(scope=scope))
    return done


def _scrub_disk(url: str) -> None:
    """A disk store's SQLite files keep no copy of what was deleted: VACUUM rewrites them
    without the freed pages and the WAL is truncated."""
    if url.startswith(("redis://", "rediss://")):
        return
    for name in ("cache.db", "scopes.db"):
        path = os.path.join(url, name)
        if os.path.exists(path):
            conn = sqlite3.connect(path, timeout=30, isolation_level=None)
            try:
                conn.execute("VACUUM")
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                conn.close()


def read_credential(env: dict[str, str], stdin: Any) -> str:
    """The credential to purge: ``CONTEXT_ENGINE_PURGE_KEY``, else one line of stdin."""
    value = env.get(KEY_ENV, "")
    if not value and stdin is not None:
        value = stdin.readline()
    value = value.strip()
    if not value:
        raise ValueError(f"--key: set {KEY_ENV} or give the key on standard input")
    return value


def add_parser(sub: Any, serve_flags: Callable[[Any], None],
               settings_of: Callable[[Any], Any]) -> None:
    """The ``purge`` subcommand (``serve_flags`` adds --config, --store, --ledger…)."""
    p = sub.add_parser("purge", help="delete a session's or a caller's data from the store and ledger")
    serve_flags(p)
    p.add_argument("--session", action="append", default=[], help="a session id (repeatable)")
    p.add_argument("--scope", action="append", default=[],
                   help="a caller scope: the 64 hex digits after '~' in its session ids")
    p.add_argument("--key", action="store_true",
                   help=f"a caller by its API key, read from ${KEY_ENV} or standard input (never argv)")
    p.add_argument("--project", default="", help="ledger rows of this project folder")
    p.add_argument("--agent", default="", help="ledger rows of this agent tag")
    p.set_defaults(func=lambda args: cmd_purge(args, settings_of(args)))


def cmd_purge(args: Any, settings: Any) -> int:
    scopes = list(args.scope)
    try:
        if args.key:
            scopes += scopes_of_key(read_credential(dict(os.environ), sys.stdin),
                                    settings.session_key, settings.store)
        done = run_purge(settings, Purge(tuple(args.session), tuple(scopes), args.project, args.agent))
    except ValueError as exc:
        print(f"context-engine purge: {exc}", file=sys.stderr)
        return 2
    except (OSError, sqlite3.Error) as exc:  # the store or the ledger did not answer
        print(f"context-engine purge: {exc}", file=sys.stderr)
        return 1
    print(f"purged {done.store_keys} store keys and {done.ledger_rows} ledger rows")
    if settings.store.startswith("memory://") and (args.session or scopes):
        print("the memory:// store lives in the proxy's process: restart it to clear it")
    return 0
