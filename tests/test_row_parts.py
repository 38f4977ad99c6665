"""The ledger row is built once, from the parts each layer returns (``row_parts``)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from context_engine.proxy.billing.estimate import BillEstimate
from context_engine.proxy.engine.context import JournalEntry, MemoryFigures, RequestContext
from context_engine.proxy.engine.pipeline import PipelineResult
from context_engine.proxy.engine.rewrite import Rewrite
from context_engine.proxy.recording.ledger import LedgerRow
from context_engine.proxy.recording.row_parts import (
    Answered,
    Measured,
    Received,
    Rewritten,
    assemble,
    bill_facts,
)

MSGS: list[Any] = [{"role": "user", "content": "hi"}]


def rewrite(memory: MemoryFigures | None = None, failed_open: bool = False) -> Rewrite:
    ctx = RequestContext(messages=MSGS, memory=memory, kind="chat")
    journal = [JournalEntry("fold", 100, 60, 1.23456, note="n"), JournalEntry("bad", 60, 60, 0.5, error="E")]
    return Rewrite(PipelineResult(ctx, journal, 100, 60, failed_open=failed_open), "o200k_base", False)


def test_every_column_comes_from_the_part_that_knows_it():
    received = Received(session="s", model="gpt-4o", arm="rewrite", api="responses", ts=5.0,
                        proxy_ms=2.0, notes={"server_state": "previous_response_id"})
    rewritten = Rewritten.of(rewrite()).with_tool(7)
    answered = Answered(200, "", 30.0, prompt_tokens=70, cached_tokens=10, recall_rounds=1)
    measured = Measured(utilization=0.5, tool_retries=2, context={"retrieval_hit": True})
    row = assemble(received, rewritten, answered, measured, BillEstimate(billing="openai"), "r1")
    assert (row.session, row.api, row.ts, row.proxy_ms, row.replica) == ("s", "responses", 5.0, 2.0, "r1")
    assert (row.tokens_original, row.tokens_sent, row.rule_errors) == (100, 67, 1)
    assert row.rule_savings == {"fold": 40, "bad": 0} and row.journal[0]["ms"] == 1.235
    assert (row.status, row.prompt_tokens, row.cached_tokens, row.recall_rounds) == (200, 70, 10, 1)
    assert (row.utilization, row.tool_retries, row.billing) == (0.5, 2, "openai")
    assert row.context == {"server_state": "previous_response_id", "kind": "chat", "retrieval_hit": True}
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.status = 500  # type: ignore[misc]


def test_long_memory_columns_sit_beside_the_notes_received():
    """A Responses request that continues server-held history keeps ``server_state`` when
    long memory is added, so the bill estimate does not price it as a whole new prefix
    (before, memory's columns replaced the notes)."""
    memory = MemoryFigures(["a"], [0.9], 3, 12, oscillation=0.25)
    received = Received(notes={"server_state": "conversation"})
    row = assemble(received, Rewritten.of(rewrite(memory)), Answered(200))
    assert row.context["server_state"] == "conversation" and row.context["injected"] == ["a"]
    assert row.oscillation == 0.25
    assert bill_facts(received, Rewritten.of(rewrite(memory)), Answered(200)).server_state


def test_failed_open_and_unspliced_rewrites():
    counted = Rewritten.counted(42)
    assert Rewritten.of(None, counted) == dataclasses.replace(counted, failed_open=True)
    assert Rewritten.of(None) == Rewritten(failed_open=True)
    failed = Rewritten.of(rewrite(failed_open=True))
    assert failed.failed_open and failed.rule_savings == {}
    unspliced = Rewritten.of(rewrite()).unspliced()
    assert (unspliced.failed_open, unspliced.tokens_sent, unspliced.rule_savings) == (True, 100, {})


def test_an_upstream_error_beats_a_finishing_note():
    row = assemble(Received(), Rewritten(), Answered(502, "unreachable"), Measured(error="shadow skipped"))
    assert row.error == "unreachable"
    assert assemble(Received(), Rewritten(), Answered(200), Measured(error="shadow skipped")).error \
        == "shadow skipped"
    assert isinstance(row, LedgerRow) and row.arm == "rewrite" and row.session == "-"
