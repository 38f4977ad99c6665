"""Regimes side by side: one replay over several session files (``bench long_traces
long_tools --replay``) and each system's bill with the way back, its worst session and
what stayed visible, per regime, in one table, against the issue's targets.

A regime's figures are its file's; nothing is pooled across regimes (a rule that holds on
average can fail one of them).
"""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

# the long-session targets (issue 48): bill with the way back, by billing model; evidence
TARGET_BILL = {"openai": 0.65, "anthropic": 0.70}
TARGET_NEXT_ACTION = 0.85


def _share(pair: list[int] | None) -> str:
    if not pair or not pair[1]:
        return "-"
    return f"{pair[0] / pair[1]:.1%} ({pair[0]}/{pair[1]})"


def rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (system, billing model, regime) of a replay report with the re-read model."""
    out = []
    for regime, result in report["files"].items():
        for system, s in result["systems"].items():
            kinds = s.get("replay", {}).get("billing", {})
            for kind, b in sorted(kinds.items()):
                w = b.get("way_back")
                if w is None:
                    continue
                by_kind = s.get("retained_by_kind", {})
                out.append({
                    "system": system, "billing": kind, "regime": regime,
                    "bill": b["cost_vs_direct"], "with_way_back": w["cost_vs_direct"],
                    "worst": (w.get("worst_session") or {}).get("cost_vs_direct", 0.0),
                    "next_action": [w["visible"], w["checked"]],
                    "reachable": [w["reachable"], w["checked"]],
                    "task": by_kind.get("task"), "invalid": s.get("invalid", 0),
                    "meets": _meets(kind, w, s),
                })
    return out


def _meets(kind: str, w: dict[str, Any], s: dict[str, Any]) -> bool:
    task = s.get("retained_by_kind", {}).get("task") or [0, 0]
    worst = (w.get("worst_session") or {}).get("cost_vs_direct", 0.0)
    return (w["cost_vs_direct"] <= TARGET_BILL.get(kind, 1.0) and worst <= 1.0
            and w["visible"] >= TARGET_NEXT_ACTION * w["checked"] and w["reachable"] == w["checked"]
            and task[0] == task[1] and not s.get("invalid"))


def regimes_table(report: dict[str, Any]) -> Table | None:
    """The table, when the replay covered more than one regime with the re-read model."""
    found = rows(report)
    if len(report.get("files", {})) < 2 or not found:
        return None
    table = Table(title="regimes side by side: bill with the way back and evidence "
                        "(targets: <= 0.65x OpenAI, <= 0.70x Anthropic, no session > 1.0x, "
                        "next-action >= 85%, reachable and task 100%)")
    for col in ("system", "billing", "regime", "bill vs direct", "with the way back",
                "worst session", "next-action visible", "reachable by id", "task", "invalid",
                "targets"):
        table.add_column(col, justify="left" if col in ("system", "billing", "regime") else "right")
    for r in sorted(found, key=lambda r: (r["system"], r["billing"], r["regime"])):
        table.add_row(escape(r["system"]), r["billing"], escape(r["regime"]), f"{r['bill']:.3f}x",
                      f"{r['with_way_back']:.3f}x", f"{r['worst']:.2f}x", _share(r["next_action"]),
                      _share(r["reachable"]), _share(r["task"]), str(r["invalid"]),
                      "met" if r["meets"] else "not met")
    return table
