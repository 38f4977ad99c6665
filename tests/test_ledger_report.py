"""Ledger rows from real requests, and the report's arithmetic."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from context_engine.proxy.billing.pricing import price_for
from context_engine.proxy.billing.row_bill import row_costs
from context_engine.proxy.recording.ledger import Ledger, LedgerRow, read_rows
from context_engine.proxy.reporting.aggregate import totals_by
from context_engine.proxy.reporting.report import parse_since
from tests.fakes.rules import DropOldAssistant

MSGS = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "Tell me about Lisbon."},
    {"role": "assistant", "content": "Lisbon is the capital of Portugal, on the Tagus river."},
    {"role": "user", "content": "and Porto?"},
]


def test_each_request_writes_one_row(start_proxy):
    proxy = start_proxy(rules=[DropOldAssistant()])
    client = proxy.client(default_headers={"X-Session-Id": "sess-1"})
    client.chat.completions.create(model="gpt-4o", messages=MSGS)
    client.chat.completions.create(model="gpt-4o", messages=MSGS, stream=True,
                                   stream_options={"include_usage": True}).close()
    rows = proxy.rows()
    assert len(rows) == 2
    row = rows[0]
    assert row["session"].startswith("sess-1~") and row["model"] == "gpt-4o"
    assert row["mode"] == "rewrite" and row["status"] == 200 and row["encoding"] == "o200k_base"
    assert row["tokens_original"] > row["tokens_sent"] > 0
    assert json.loads(row["rule_savings"]) == {"drop_old_assistant": row["tokens_original"] - row["tokens_sent"]}
    assert row["prompt_tokens"] == row["tokens_sent"]  # the mock counts what it received
    assert row["completion_tokens"] == 9 and row["proxy_ms"] > 0 and row["upstream_ms"] > 0


def test_cost_arithmetic_uses_cached_rate():
    p = price_for("gpt-4o")
    assert p is not None
    row = {"model": "gpt-4o", "tokens_original": 1500, "tokens_sent": 1000, "prompt_tokens": 1000,
           "cached_tokens": 400, "completion_tokens": 10}
    costs = row_costs(row)
    assert costs is not None
    original, actual = costs
    assert actual == pytest.approx(600 * p.input + 400 * p.cached_input + 10 * p.output)
    assert original == pytest.approx(1100 * p.input + 400 * p.cached_input + 10 * p.output)
    assert row_costs({"model": "no-such-model"}) is None


def test_totals_per_model(tmp_path):
    path = str(tmp_path / "l.db")
    ledger = Ledger(path)
    for model, before, after in [("gpt-4o", 100, 60), ("gpt-4o", 200, 200), ("gpt-4", 50, 40)]:
        ledger.record(LedgerRow(model=model, tokens_original=before, tokens_sent=after,
                                prompt_tokens=after, cached_tokens=0, completion_tokens=0,
                                rule_savings={"r": before - after}))
    ledger.close()
    totals = {t.key: t for t in totals_by(read_rows(path), "model")}
    t = totals["gpt-4o"]
    assert (t.requests, t.tokens_original, t.tokens_sent) == (2, 300, 260)
    assert t.saving_pct == pytest.approx(100 * 40 / 300)
    assert totals["gpt-4"].saving_pct == pytest.approx(20.0)


def test_parse_since():
    assert parse_since("2h", now=10_000.0) == 10_000.0 - 7200
    assert parse_since("2026-01-01") == 1767225600.0
    with pytest.raises(ValueError):
        parse_since("yesterday")


def test_report_command_prints_the_bill(start_proxy):
    proxy = start_proxy(rules=[DropOldAssistant()])
    proxy.client().chat.completions.create(model="gpt-4o", messages=MSGS)
    proxy.rows()
    r = subprocess.run([sys.executable, "-m", "context_engine.proxy.cli", "report", "--ledger", proxy.ledger_path,
                        "--config", "/dev/null", "--since", "1h"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "gpt-4o" in r.stdout and "saving" in r.stdout and "$" in r.stdout
    bad = subprocess.run([sys.executable, "-m", "context_engine.proxy.cli", "report", "--ledger", proxy.ledger_path,
                          "--config", "/dev/null", "--since", "soon"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--since" in bad.stderr


def test_report_shows_client_strings_literally_and_csv_cells_cannot_be_formulas(start_proxy):
    proxy = start_proxy()
    client = proxy.client(default_headers={"x-session-id": "=HYPERLINK(\"http://x\")"})
    client.chat.completions.create(model="[bold red]gpt[/]", messages=MSGS)
    client.chat.completions.create(model="@SUM(1)", messages=MSGS)
    proxy.rows()

    def report(*args: str) -> str:
        r = subprocess.run([sys.executable, "-m", "context_engine.proxy.cli", "report", "--ledger",
                            proxy.ledger_path, "--config", "/dev/null", *args],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return r.stdout

    assert "[bold red]gpt[/]" in report("--by", "model")
    cells = [c for line in report("--by", "session", "--format", "csv").splitlines()[1:]
             for c in next(csv.reader([line]))]
    assert "'=HYPERLINK(\"http://x\")" in {c.split("~")[0] for c in cells}
    assert not any(c[:1] in ("=", "+", "-", "@", "\t", "\r") for c in cells if c)
    models = [next(csv.reader([line]))[0] for line in report("--format", "csv").splitlines()[1:]]
    assert "'@SUM(1)" in models
