"""Regimes side by side (issue 48, part 5): each regime's own figures, judged against the
targets one by one; nothing pooled."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from context_engine.bench.report_regimes import regimes_table, rows


def system(bill: float, way_back: float, worst: float, visible: int, reachable: int,
           task: list[int], invalid: int = 0) -> dict[str, Any]:
    w = {"cost_vs_direct": way_back, "worst_session": {"cost_vs_direct": worst},
         "visible": visible, "reachable": reachable, "checked": 100, "cuts": 1}
    return {"invalid": invalid, "retained_by_kind": {"task": task},
            "replay": {"billing": {"openai": {"cost_vs_direct": bill, "way_back": w}}}}


def report(coding: dict[str, Any], tools: dict[str, Any]) -> dict[str, Any]:
    return {"mode": "replay", "files": {"coding": {"systems": {"engine": coding}},
                                        "tools": {"systems": {"engine": tools}}}}


def test_each_regime_is_judged_on_its_own_figures() -> None:
    good = system(0.60, 0.62, 0.9, 90, 100, [10, 10])
    found = {r["regime"]: r["meets"] for r in rows(report(good, good))}
    assert found == {"coding": True, "tools": True}
    for bad in (system(0.60, 0.66, 0.9, 90, 100, [10, 10]),  # the way back tips the bill over
                system(0.60, 0.62, 1.01, 90, 100, [10, 10]),  # one session above direct
                system(0.60, 0.62, 0.9, 84, 100, [10, 10]),  # next-action evidence under 85%
                system(0.60, 0.62, 0.9, 90, 99, [10, 10]),  # a piece no id reaches
                system(0.60, 0.62, 0.9, 90, 100, [9, 10]),  # a task line lost
                system(0.60, 0.62, 0.9, 90, 100, [10, 10], invalid=1)):
        found = {r["regime"]: r["meets"] for r in rows(report(good, bad))}
        assert found == {"coding": True, "tools": False}


def test_the_table_needs_two_regimes() -> None:
    good = system(0.60, 0.62, 0.9, 90, 100, [10, 10])
    one = {"mode": "replay", "files": {"coding": {"systems": {"engine": good}}}}
    assert regimes_table(one) is None
    console = Console(width=250, record=True)
    console.print(regimes_table(report(good, good)))
    text = console.export_text()
    assert "coding" in text and "tools" in text and "0.620x" in text and "met" in text
