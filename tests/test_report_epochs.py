"""`context-engine report` shows each agent session's compaction epochs from the ledger:
what they cleared, what they cost once, what they saved since."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console

from context_engine.proxy.reporting import epochs
from context_engine.proxy.reporting.report import build, render


def row(session: str, epoch: int, fired: bool, save: float, miss: float = 0.0,
        cleared: int = 0, assumed: bool = False) -> dict[str, Any]:
    compaction = {"kind": "agent", "epoch": epoch, "fired": fired, "cleared": 3,
                  "cleared_tokens": cleared, "miss_tokens": miss, "save_per_request": save,
                  "reason": "pays" if fired else "", "assumed": assumed}
    return {"session": session, "model": "gpt-5", "tokens_original": 100, "tokens_sent": 80,
            "context": json.dumps({"kind": "agent", "compaction": compaction})}


def test_a_sessions_epochs_add_up_what_they_cleared_cost_and_saved() -> None:
    rows = [row("s1", 0, False, 0), row("s1", 1, True, 400, miss=3000, cleared=4000),
            row("s1", 1, False, 400), row("s1", 1, False, 400),
            row("s1", 2, True, 700, miss=1000, cleared=3000), row("s1", 2, False, 700),
            {"session": "chat", "context": json.dumps({"kind": "chat"})}]
    (s,) = epochs.by_session(rows)
    assert (s.session, s.epochs, s.requests, s.cleared_tokens) == ("s1", 2, 6, 7000)
    assert s.miss_tokens == 4000
    # a fired request pays its miss; the saving starts with the request after it
    assert s.saved_tokens == 400 + 400 + 400 + 700
    assert s.net_tokens == 1900 - 4000
    assert epochs.kinds(rows) == {"agent": 6, "chat": 1}


def test_the_report_prints_one_line_per_session_and_marks_assumed_prices() -> None:
    rows = [row("sess-a", 1, True, 100, miss=50, cleared=1000, assumed=True), row("sess-a", 1, False, 100)]
    data = build(rows, "session")
    assert data["epochs"][0]["session"] == "sess-a" and data["epochs"][0]["assumed"]
    console = Console(record=True, width=200)
    for part in render(data):
        console.print(part)
    text = console.export_text()
    assert "Compaction epochs by session" in text and "sess-a (prices assumed)" in text


def test_no_epoch_no_table() -> None:
    assert "epochs" not in build([row("s", 0, False, 0)], "session")
