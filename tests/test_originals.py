"""Stored originals: one reference format, stored once, read back only by that format."""

from __future__ import annotations

from context_engine.proxy.engine.originals import (
    cited_id,
    cites_original,
    keep_original,
    original_id,
    stored_original,
)
from context_engine.proxy.store.stores import MemoryStore


def test_a_reference_is_the_store_key_and_the_marker_text():
    ref = original_id("plain")
    assert ref == "orig:a116c9ed46d6" and cites_original(f"stored as {ref}")
    assert cited_id(f"[tool_json: rows cut; original: {ref}]") == ref
    assert cited_id("plain") == ref


def test_content_is_stored_once_and_read_back():
    store = MemoryStore()
    ref = keep_original(store, "the original", scope="c")
    assert keep_original(store, "something else", ref, scope="c") == ref  # never overwritten
    assert stored_original(store, ref, scope="c") == "the original"
    assert stored_original(store, original_id("never stored"), scope="c") is None


def test_only_references_are_readable():
    store = MemoryStore()
    store.set("sum:abc", b"a block summary")
    assert stored_original(store, "sum:abc", scope="") is None
    assert stored_original(store, "orig:" + "0" * 12 + " or more", scope="") is None
