"""The dashboard plots re-reads and recall calls against tokens saved, and shows the A/B
verdict, in a real headless Chromium against a proxy with a seeded ledger (skips, saying
what is missing, without Chromium; see ``tests/test_dashboard.py``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from context_engine.proxy.recording.ledger import LedgerRow
from context_engine.proxy.reporting.stats import stats_from_ledger
from tests.test_dashboard import HOUR, browser, ledger_server, read, screenshot, wait_ready

__all__ = ["browser"]  # the fixture, shared


def seed(now: float) -> list[LedgerRow]:
    """Six sessions, one an hour (each within its hour: one bar each), three turns each."""
    now = now // HOUR * HOUR + 600  # ten minutes into this hour
    rows = []
    for i in range(6):
        arm = "rewrite" if i % 2 else "passthrough"
        for turn in range(3):
            rereads = 1 if arm == "rewrite" and turn == 2 else 0
            rows.append(LedgerRow(ts=now - HOUR * (i + 1) + 60 * turn, session=f"s{i}", model="gpt-4o",
                                  mode="ab", arm=arm, status=200, tokens_original=10_000,
                                  tokens_sent=7_000 if arm == "rewrite" else 10_000,
                                  prompt_tokens=7_000 if arm == "rewrite" else 10_000,
                                  completion_tokens=100, rereads=rereads, reread_tokens=900 * rereads,
                                  reread_rules={"compact": [1, 900]} if rereads else {},
                                  recall_calls=1 if arm == "rewrite" and turn == 1 else 0,
                                  recall_tokens=400 if arm == "rewrite" and turn == 1 else 0,
                                  rule_savings={"compact": 3_000} if arm == "rewrite" else {},
                                  finish_reason="stop" if turn == 2 else "tool_calls"))
    return rows


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, str]]:
    yield from ledger_server(tmp_path, seed(time.time()))


def test_the_dashboard_plots_rereads_and_recall_calls_against_tokens_saved(browser: Any, server: Any) -> None:
    from selenium.webdriver.common.by import By

    url, path = server
    browser.get(url + "/dashboard#since=24h")
    wait_ready(browser, "24h")
    stats = stats_from_ledger(path, time.time() - 86400)
    q = stats["quality"]
    assert q["overall"]["rereads"] == 3 and q["overall"]["recall_calls"] == 3
    bars = browser.find_elements(By.CSS_SELECTOR, "#quality-chart g[data-bucket]")
    assert len(bars) == len(q["rows"]) == 6
    assert sum(int(b.get_attribute("data-rereads")) for b in bars) == 3
    assert sum(int(b.get_attribute("data-recalls")) for b in bars) == 3
    line = read(browser, "quality-line")
    assert line.startswith("3 re-reads of results the proxy cleared (2,700 tokens; by rule: compact 3)")
    assert "3 recall calls brought back 1,200 tokens" in line
    assert read(browser, "ab-verdict").startswith("Verdict: rules cost 0.")
    screenshot(browser, "dashboard-quality.png")
