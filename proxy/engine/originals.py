"""Stored originals: what a lossy rewrite keeps of the content it shortened, under the one
key format every rule (and the way back to it) uses.

A reference is ``orig:`` and the first 12 hex digits of the content's sha256. It is both
the store key and the text a marker shows (``[tool_json: … cut; original: orig:1a2b…]``,
``stored as orig:1a2b…``, ``[orig:1a2b…]`` in a summary line). Content is stored once
per caller, never overwritten.

The store key is the reference and the caller's scope (``session.caller_hash``):
``orig:1a2b…@<scope>``. An id is only a hash of content, and ids travel (markers,
model replies, logs); keyed per caller, an id another caller names reads nothing.
"""

from __future__ import annotations

import hashlib
import re

from context_engine.proxy.store.stores import Store

PREFIX = "orig:"
REFERENCE = re.compile(r"orig:([0-9a-f]{12})(?![0-9a-f])")  # group 1: the id


def reference_id(text: str) -> str | None:
    """The id that ``orig:<id>`` or a bare ``<id>`` names; None for anything else."""
    found = REFERENCE.fullmatch(text if text.startswith(PREFIX) else PREFIX + text)
    return found.group(1) if found else None


def original_id(content: str) -> str:
    """The reference of ``content``: ``orig:`` + 12 hex digits of its sha256."""
    return PREFIX + hashlib.sha256(content.encode()).hexdigest()[:12]


def cites_original(text: str) -> bool:
    """Whether ``text`` names a stored original (a marker left by a rule)."""
    return REFERENCE.search(text) is not None


def cited_id(content: str) -> str:
    """The original ``content`` stands for: the one its marker names when a rule already
    shortened it, else its own reference."""
    found = REFERENCE.search(content)
    return found.group(0) if found else original_id(content)


def store_key(ref: str, scope: str) -> str:
    """Where ``ref`` of the caller ``scope`` is stored."""
    return f"{ref}@{scope[:32]}"


def keep_original(store: Store, content: str, ref: str | None = None, *, scope: str) -> str:
    """Store ``content`` under ``ref`` (default: its own reference) for the caller
    ``scope`` unless something is there already; the reference."""
    ref = ref or original_id(content)
    key = store_key(ref, scope)
    if store.get(key) is None:
        store.set(key, content.encode())
    return ref


def stored_original(store: Store, ref: str, *, scope: str) -> str | None:
    """The content the caller ``scope`` stored under ``ref``, or None (unknown, evicted,
    or another caller's)."""
    raw = store.get(store_key(ref, scope)) if REFERENCE.fullmatch(ref) else None
    return raw.decode("utf-8", "replace") if raw is not None else None
