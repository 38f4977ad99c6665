"""``context-engine kb``: document status, clause counts, embedding into the store, a trial
search, and clear errors. A broken document never breaks a request."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from context_engine.proxy.cli import main
from context_engine.proxy.engine.messages import MEMORY_HEADER, text_of
from context_engine.rules.retrieve.rule import Retrieve
from tests.harness import run_rule

OLD = """---
valid_from: 2023-01-01
valid_to: 2024-01-01
conflict_group: refunds
source_priority: 1
---
Refunds are accepted within 14 days of purchase.
"""
NEW = """---
valid_from: 2024-01-02
conflict_group: refunds
source_priority: 2
applicable_scenario: customer service
---
Refunds are accepted within 30 days of purchase with a receipt.

Store credit is offered after 30 days.
"""
LOW = """---
conflict_group: refunds
source_priority: 0
---
Refunds are never accepted.
"""
FUTURE = """{"metadata": {"valid_from": "2030-01-01"}, "content": "Drones deliver every parcel."}"""


def folder(tmp_path: Path, broken: bool = False) -> Path:
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "refund_old.md").write_text(OLD)
    (kb / "refund_new.md").write_text(NEW)
    (kb / "refund_low.md").write_text(LOW)
    (kb / "future.json").write_text(FUTURE)
    if broken:
        (kb / "bad.yaml").write_text("metadata: [broken\n")
    return kb


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["kb", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_kb_reports_each_document_and_embeds_clauses_once(tmp_path, capsys):
    kb = folder(tmp_path)
    store = str(tmp_path / "store")
    code, out, _ = run(capsys, "--dir", str(kb), "--store", store, "--date", "2024-06-01")
    assert code == 0
    assert "refund_new.md: valid, 2 clauses" in out
    assert "refund_old.md: expired on 2024-01-01" in out
    assert f"refund_low.md: superseded by {kb / 'refund_new.md'} (conflict group refunds)" in out
    assert "future.json: valid from 2030-01-01" in out
    assert "2 clauses from 1 of 4 documents" in out and "(2 embedded now" in out
    code, out, _ = run(capsys, "--dir", str(kb), "--store", store, "--date", "2024-06-01")
    assert "(0 embedded now" in out  # the store kept them: a server start finds them cached


def test_kb_trial_search_prints_the_zone(tmp_path, capsys):
    kb = folder(tmp_path)
    code, out, _ = run(capsys, "--dir", str(kb), "--store", "memory://", "--date", "2024-06-01",
                       "--query", "How many days do I have to ask for a refund?")
    assert code == 0
    zone = out[out.index(MEMORY_HEADER):]
    assert "From the knowledge base" in zone
    assert "[knowledge refund_new.md §1, customer service]" in zone
    assert "30 days of purchase with a receipt" in zone
    assert "14 days" not in zone and "never accepted" not in zone


def test_kb_broken_document_is_reported_and_strict_fails(tmp_path, capsys):
    kb = folder(tmp_path, broken=True)
    code, out, _ = run(capsys, "--dir", str(kb), "--store", "memory://", "--date", "2024-06-01")
    assert code == 0
    assert "bad.yaml: unreadable (ParserError" in out
    code, _, _ = run(capsys, "--dir", str(kb), "--store", "memory://", "--date", "2024-06-01", "--strict")
    assert code == 1


def test_kb_bad_input_exits_2_with_a_message(tmp_path):
    for args, message in ((["--dir", str(tmp_path / "missing")], "no knowledge folder"),
                          (["--dir", str(tmp_path), "--date", "2024-13-01"], "knowledge_date must be an ISO date")):
        r = subprocess.run([sys.executable, "-m", "context_engine.proxy.cli", "kb", "--store", "memory://", *args],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2, r.stderr
        assert message in r.stderr and "Traceback" not in r.stderr


def test_a_broken_document_never_breaks_a_request(tmp_path):
    kb = folder(tmp_path, broken=True)
    msgs = [{"role": "system", "content": "You are a support agent."},
            {"role": "user", "content": "How many days do I have to ask for a refund?"}]
    out = run_rule(Retrieve, msgs, embedder="hashing", knowledge_dir=str(kb),
                   knowledge_date="2024-06-01", threshold=0.0)
    zone = [text_of(m) for m in out.messages if text_of(m).startswith(MEMORY_HEADER)]
    assert zone and "30 days" in zone[0]
