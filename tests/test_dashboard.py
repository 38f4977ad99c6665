"""The dashboard in a real headless Chromium, against a proxy with a seeded ledger.

Needs Debian's ``chromium`` and ``chromium-driver`` and Selenium from PyPI; skips,
saying which is missing, without them. Selenium is pointed at the system driver and
browser, so it never downloads one. Saves ``test-artifacts/dashboard.png``.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from context_engine.proxy.demo.mock_upstream import ServerThread
from context_engine.proxy.edge.app import create_app
from context_engine.proxy.recording.ledger import Ledger, LedgerRow
from context_engine.proxy.reporting.report import parse_since
from context_engine.proxy.reporting.stats import stats_from_ledger
from context_engine.proxy.settings import load_settings

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts"
CHROMIUM = os.environ.get("CHROMIUM_BIN") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = os.environ.get("CHROMEDRIVER") or shutil.which("chromedriver") or "/usr/bin/chromedriver"
FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1280,900", "--force-device-scale-factor=1", "--lang=en-US"]

HOUR, DAY = 3600.0, 86400.0


def _missing() -> str | None:
    if importlib.util.find_spec("selenium") is None:
        return "selenium is not installed (pip install selenium)"
    if not os.path.exists(CHROMIUM):
        return f"chromium not found at {CHROMIUM} (apt-get install chromium)"
    if not os.path.exists(CHROMEDRIVER):
        return f"chromedriver not found at {CHROMEDRIVER} (apt-get install chromium-driver)"
    return None


def journal(*entries: tuple[str, int, int], error: str = "") -> list[dict[str, Any]]:
    out = [{"rule": r, "before": b, "after": a, "ms": 0.4, "note": "", "error": ""} for r, b, a in entries]
    if error:
        out.append({"rule": error, "before": 0, "after": 0, "ms": 0.1, "note": "", "error": "ValueError()"})
    return out


def seed_rows(now: float) -> list[LedgerRow]:
    """Two models, three rules (one failing once), a failed-open row, a shadow row,
    A/B sessions in both arms, and one row too old for the 7-day window."""
    def row(ago: float, **kw: Any) -> LedgerRow:
        kw.setdefault("status", 200)
        kw.setdefault("completion_tokens", 120)
        kw.setdefault("upstream_ms", 800.0)
        kw.setdefault("replica", "replica-a" if kw.get("session") == "s1" else "replica-b")
        return LedgerRow(ts=now - ago, path="/v1/chat/completions", **kw)

    rows = [
        row(30 * HOUR, session="s1", model="gpt-4o", tokens_original=12_000, tokens_sent=7_000,
            prompt_tokens=7_000, cached_tokens=2_000, proxy_ms=4.2, utilization=0.42, oscillation=0.0,
            context={"kind": "agent", "compaction": {
                "kind": "agent", "epoch": 1, "fired": True, "cleared": 4, "cleared_tokens": 5_000,
                "miss_tokens": 6_300.0, "save_per_request": 500.0, "reason": "pays", "assumed": False}},
            journal=journal(("fold_duplicates", 12_000, 9_000), ("tool_json", 9_000, 7_000))),
        row(29 * HOUR, session="s1", model="gpt-4o", tokens_original=15_000, tokens_sent=9_500,
            prompt_tokens=9_500, cached_tokens=6_000, proxy_ms=6.8, completion_tokens=300,
            utilization=0.58, oscillation=0.25, est_cached_original=11_000, cache_write_tokens=500,
            prefix_kept_tokens=6_500, prefix_break_index=4, prefix_break_rule="fold_duplicates",
            provider_missed_tokens=1_500,
            context={"kind": "agent", "compaction": {
                "kind": "agent", "epoch": 1, "fired": False, "cleared": 4, "cleared_tokens": 0,
                "miss_tokens": 0.0, "save_per_request": 500.0, "reason": "", "assumed": False}},
            journal=journal(("fold_duplicates", 15_000, 11_000), ("tool_json", 11_000, 9_500))),
        row(20 * HOUR, session="s2", model="gpt-4o-mini", tokens_original=8_000, tokens_sent=6_000,
            prompt_tokens=6_000, cached_tokens=0, proxy_ms=2.1,
            journal=journal(("fold_duplicates", 8_000, 8_000), ("budget", 8_000, 6_000))),
        row(19 * HOUR, session="s2", model="gpt-4o-mini", tokens_original=9_000, tokens_sent=9_000,
            prompt_tokens=9_000, cached_tokens=4_000, proxy_ms=15.5, failed_open=True, rule_errors=1,
            journal=journal(("fold_duplicates", 9_000, 8_500), error="budget")),
        row(5 * HOUR, session="s3", model="gpt-4o", tokens_original=20_000, tokens_sent=15_000, mode="shadow",
            arm="shadow", prompt_tokens=20_000, cached_tokens=0, proxy_ms=1.1,
            journal=journal(("fold_duplicates", 20_000, 16_000), ("tool_json", 16_000, 15_000))),
        row(10 * DAY, session="old", model="gpt-4o", tokens_original=50_000, tokens_sent=25_000,
            prompt_tokens=25_000, cached_tokens=0, proxy_ms=3.0,
            journal=journal(("fold_duplicates", 50_000, 25_000))),
    ]
    # A/B: two sessions per arm, two requests each.
    for i, (session, arm, original, sent) in enumerate([
            ("ab1", "rewrite", 10_000, 6_000), ("ab2", "rewrite", 11_000, 7_500),
            ("ab3", "passthrough", 10_500, 10_500), ("ab4", "passthrough", 12_000, 12_000)]):
        for turn in range(2):
            extra = 1_000 * turn + 100 * i
            rewritten = arm == "rewrite"
            rows.append(row(3 * HOUR - 60 * (2 * i + turn), session=session, model="gpt-4o-mini", mode="ab",
                            arm=arm, tokens_original=original + extra, tokens_sent=sent + extra,
                            prompt_tokens=sent + extra, cached_tokens=1_000 * turn, proxy_ms=1.5 + i,
                            finish_reason="length" if (i, turn) == (3, 1) else "stop",
                            journal=journal(("tool_json", original + extra, sent + extra))
                            if rewritten else []))
    return sorted(rows, key=lambda r: r.ts)  # the proxy appends in time order


@pytest.fixture
def browser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    reason = _missing()
    if reason:
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    monkeypatch.setenv("SE_OFFLINE", "true")  # never let Selenium Manager fetch a driver
    options = Options()
    options.binary_location = CHROMIUM
    for flag in FLAGS + [f"--user-data-dir={tmp_path / 'chrome-profile'}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def ledger_server(tmp_path: Path, rows: list[LedgerRow]) -> Iterator[tuple[str, str]]:
    """A proxy (no rules) over a ledger holding ``rows``: its URL and the ledger's path."""
    path = str(tmp_path / "ledger.db")
    ledger = Ledger(path)
    for r in rows:
        ledger.record(r)
    ledger.flush()
    ledger.close()
    settings = load_settings(flags={"rules": "", "store": "memory://", "ledger": path}, env={},
                             config_path=os.devnull)
    with ServerThread(create_app(settings)) as server:
        yield server.url, path


@pytest.fixture
def dashboard_server(tmp_path: Path) -> Iterator[tuple[str, str]]:
    yield from ledger_server(tmp_path, seed_rows(time.time()))


def number(text: str) -> float:
    """What a person reads: '$1,234.5678' → 1234.5678, '−$0.01' → -0.01, '12.5%' → 12.5."""
    cleaned = text.replace("−", "-").replace("$", "").replace(",", "").replace("%", "").strip()
    assert re.fullmatch(r"[-+]?\d+(\.\d+)?", cleaned), f"not a number: {text!r}"
    return float(cleaned)


def shown_as(text: str, expected: float) -> None:
    """The number on screen is the expected one, to the precision it is shown with."""
    digits = len(text.split(".")[1].rstrip("%")) if "." in text else 0
    assert abs(number(text) - expected) <= 0.5 * 10 ** -digits + 1e-12, (text, expected)


def read(driver: Any, testid: str) -> str:
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.CSS_SELECTOR, f'[data-testid="{testid}"]').text)


def wait_ready(driver: Any, since: str) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 20).until(lambda d: d.execute_script(
        "return document.body.dataset.state === 'ready' && document.body.dataset.since === arguments[0]",
        since))


def screenshot(driver: Any, name: str) -> Path:
    """The whole page, not just the viewport."""
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": 1280, "height": height, "deviceScaleFactor": 1, "mobile": False})
    ARTIFACTS.mkdir(exist_ok=True)
    out = ARTIFACTS / name
    try:
        driver.save_screenshot(str(out))
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    return out


def check_headline(driver: Any, stats: dict[str, Any]) -> None:
    o = stats["overall"]
    assert number(read(driver, "requests")) == o["requests"]
    assert number(read(driver, "tokens-original")) == o["tokens_original"]
    assert number(read(driver, "tokens-sent")) == o["tokens_sent"]
    assert number(read(driver, "cached-tokens")) == o["cached_tokens"]
    assert number(read(driver, "would-save")) == o["would_save"]
    shown_as(read(driver, "tokens-saved-pct"), o["token_saving_pct"])
    shown_as(read(driver, "cost-original"), o["cost_original"])
    shown_as(read(driver, "cost-actual"), o["cost_actual"])
    shown_as(read(driver, "cost-saved-pct"), o["saving_pct"])
    assert number(read(driver, "cache-writes")) == o["cache_write_tokens"]
    assert number(read(driver, "est-cached")) == o["est_cached_original"]
    shown_as(read(driver, "failed-open-share"), 100 * stats["failed_open_share"])
    shown_as(read(driver, "utilization"), 100 * stats["context"]["utilization_mean"])
    shown_as(read(driver, "oscillation"), 100 * stats["context"]["oscillation_mean"])


def test_dashboard_shows_the_ledger_numbers(browser: Any, dashboard_server: tuple[str, str]) -> None:
    from selenium.webdriver.common.by import By

    url, ledger_path = dashboard_server
    browser.get(url + "/dashboard")
    wait_ready(browser, "7d")
    assert browser.execute_script("return document.body.dataset.state") == "ready"
    stats = stats_from_ledger(ledger_path, parse_since("7d"))

    # Hand-computed from seed_rows: 13 rows in the window (the 10-day-old one is out).
    assert stats["overall"]["requests"] == 13
    check_headline(browser, stats)
    assert read(browser, "requests") == "13"
    assert read(browser, "would-save") == "5,000"  # the shadow row: 20,000 → 15,000, not sent
    assert read(browser, "failed-open-share") == "7.7%"  # 1 of 13
    assert read(browser, "utilization") == "50.0%"  # mean of 0.42 and 0.58

    # The original cost is labelled; cache breaks by cause; provider misses.
    assert stats["overall"]["cost_original_basis"] == "mixed"
    assert read(browser, "cost-basis").lower() == "estimate"
    breaks = browser.find_element(By.CSS_SELECTOR, '#breaks tr[data-cause="fold_duplicates"]')
    assert breaks.find_element(By.CSS_SELECTOR, 'td[data-col="breaks"]').text == "1"
    assert number(breaks.find_element(By.CSS_SELECTOR, 'td[data-col="tokens_after_break"]').text) == 3_000
    assert "missed 1 cache hits" in read(browser, "provider-misses")

    # Per-rule table: one row per rule, with the journal's numbers.
    rules = {r["rule"]: r for r in stats["by_rule"]}
    assert set(rules) == {"fold_duplicates", "tool_json", "budget"}
    assert rules["fold_duplicates"]["saved"] == 3_000 + 4_000 + 0 + 0  # failed-open row counts 0
    assert rules["fold_duplicates"]["would_save"] == 4_000
    assert rules["budget"]["failures"] == 1
    for name, r in rules.items():
        tr = browser.find_element(By.CSS_SELECTOR, f'#rules tr[data-rule="{name}"]')
        for col in ("saved", "fired", "runs", "failures", "would_save"):
            cell = tr.find_element(By.CSS_SELECTOR, f'td[data-col="{col}"]').text
            assert number(cell) == r[col], (name, col, cell)

    # Compaction epochs: session s1's one epoch, its miss and what it saved since.
    (epoch,) = stats["compaction"]["sessions"]
    assert (epoch["session"], epoch["epochs"], epoch["saved_tokens"]) == ("s1", 1, 500.0)
    tr = browser.find_element(By.CSS_SELECTOR, '#epochs tr[data-session="s1"]')
    assert tr.find_element(By.CSS_SELECTOR, 'td[data-col="epochs"]').text == "1"
    assert "agent 2" in read(browser, "kinds")

    # Cost before and after, per model.
    for m in stats["by_model"]:
        tr = browser.find_element(By.CSS_SELECTOR, f'#models tr[data-model="{m["key"]}"]')
        assert number(tr.find_element(By.CSS_SELECTOR, 'td[data-col="requests"]').text) == m["requests"]
        shown_as(tr.find_element(By.CSS_SELECTOR, 'td[data-col="cost_original"]').text, m["cost_original"])
        shown_as(tr.find_element(By.CSS_SELECTOR, 'td[data-col="cost_actual"]').text, m["cost_actual"])
    assert len(browser.find_elements(By.CSS_SELECTOR, "#models tbody tr")) == 2

    # Per replica: every process that wrote to the ledger.
    assert [(r["key"], r["requests"]) for r in stats["by_replica"]] == [("replica-a", 2), ("replica-b", 11)]
    for rep in stats["by_replica"]:
        tr = browser.find_element(By.CSS_SELECTOR, f'#replicas tr[data-replica="{rep["key"]}"]')
        for col in ("requests", "tokens_original", "tokens_sent"):
            assert number(tr.find_element(By.CSS_SELECTOR, f'td[data-col="{col}"]').text) == rep[col]

    # A/B: per-arm numbers and the difference of the means.
    ab = stats["ab"]
    assert ab is not None and ab["arms"]["rewrite"]["sessions"] == 2
    for arm in ("rewrite", "passthrough"):
        cell = f'#ab tr[data-metric="{{}}"] td[data-arm="{arm}"]'
        assert number(browser.find_element(By.CSS_SELECTOR, cell.format("requests")).text) == 4
        shown_as(browser.find_element(By.CSS_SELECTOR, cell.format("cost_per_request")).text,
                 ab["arms"][arm]["cost_per_request"])
    shown_as(read(browser, "ab-cost-diff"), ab["cost_diff"]["diff"])
    shown_as(read(browser, "ab-tokens-diff"), ab["prompt_tokens_diff"]["diff"])
    assert "95% CI" in browser.find_element(By.ID, "ab").text

    # Slowest requests, slowest first; the over-time chart has one bar group per bucket.
    ids = [int(tr.get_attribute("data-row-id")) for tr in browser.find_elements(By.CSS_SELECTOR, "#slowest tbody tr")]
    assert ids == [r["id"] for r in stats["slowest"]]
    groups = browser.find_elements(By.CSS_SELECTOR, "#time-chart g[data-bucket]")
    assert [g.get_attribute("data-bucket") for g in groups] == [r["key"] for r in stats["over_time"]["rows"]]

    shot = screenshot(browser, "dashboard.png")
    assert shot.stat().st_size > 10_000

    # The window selector refetches: "All" brings the 10-day-old row back.
    browser.find_element(By.CSS_SELECTOR, '#since button[data-since="all"]').click()
    wait_ready(browser, "all")
    check_headline(browser, stats_from_ledger(ledger_path, None))
    assert read(browser, "requests") == "14"


def test_dashboard_explains_ab_mode_when_it_is_off(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    path = str(tmp_path / "empty.db")
    settings = load_settings(flags={"rules": "", "store": "memory://", "ledger": path}, env={},
                             config_path=os.devnull)
    with ServerThread(create_app(settings)) as server:
        browser.get(server.url + "/dashboard#since=24h")
        wait_ready(browser, "24h")
        assert read(browser, "requests") == "0"
        assert "mode: ab" in read(browser, "ab-off")
        assert browser.find_elements(By.CSS_SELECTOR, "#models tbody tr td[colspan]")
