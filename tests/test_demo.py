"""The demo runs offline end to end and leaves its requests in the ledger."""

from __future__ import annotations

import subprocess
import sys

import pytest

from context_engine.proxy.demo.conversation import conversation, request_points
from context_engine.proxy.engine.invariants import problems
from context_engine.proxy.recording.ledger import read_rows


def test_sample_conversation_is_a_valid_request_at_every_point():
    msgs = conversation()
    for point in request_points(msgs):
        assert problems(msgs[: point + 1]) == []


@pytest.mark.slow
def test_demo_replays_through_the_sdk_and_reports(tmp_path):
    ledger = tmp_path / "demo.db"
    r = subprocess.run([sys.executable, "-m", "context_engine.proxy.cli", "demo", "--ledger", str(ledger),
                        "--store", "memory://", "--config", "/dev/null"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = read_rows(str(ledger))
    assert len(rows) == len(request_points(conversation()))
    assert all(row["status"] == 200 and row["prompt_tokens"] for row in rows)
    assert "bill before and after" in r.stdout and "gpt-4o" in r.stdout
