"""The long-session frontier with and without what clearing costs the agent, for
``docs/benchmarks.md``, read from a replay's own ``--json`` output under ``docs/results/``
(``context-engine bench long_traces --replay --anthropic --variant …``, the re-read model
on: ``bench/reread.py``). A missing field is a ``KeyError``: a page is never generated
from a run that did not price the way back.

- ``way_back``: per system (the defaults, then each variant), tokens sent, next-action
  evidence visible and brought back, each provider's bill without and with the way back,
  the recall rounds and re-run commands it took per session, the worst session, and the
  break-even: how many times as often as at the cut points a variant's agent could need
  its way back before the variant costs as much as the defaults with theirs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from context_engine.bench.docs_format import BILLS, PRIMARY, read, signed, table
from context_engine.bench.docs_tables import sources, system_label


def _bill(s: dict[str, Any], kind: str) -> str:
    """``0.761× → 0.768×``: the bill of the replayed requests, then with the way back."""
    b = s["replay"]["billing"][kind]
    return f"{b['cost_vs_direct']:.3f}× → **{b['way_back']['cost_vs_direct']:.3f}×**"


def _evidence(s: dict[str, Any]) -> str:
    """Next-action evidence visible, and reachable after the way back (OpenAI replay)."""
    w = s["replay"]["billing"]["openai"]["way_back"]
    lost = f", {w['unreachable']} lost" if w["unreachable"] else ""
    return f"{w['visible']}/{w['checked']} → {w['reachable']}/{w['checked']}{lost}"


def _took(s: dict[str, Any]) -> str:
    """Recall rounds and re-run commands per session, OpenAI replay (and in all)."""
    w = s["replay"]["billing"]["openai"]["way_back"]
    per = w["per_session"]
    return (f"{per['recall_rounds']:.2f} / {per['rereads']:.2f} "
            f"({w['recall_rounds']} / {w['rereads']})")


def _worst(s: dict[str, Any]) -> str:
    return " / ".join(f"{s['replay']['billing'][k]['way_back']['worst_session']['cost_vs_direct']:.2f}×"
                      for k in BILLS)


def break_even(s: dict[str, Any], defaults: dict[str, Any]) -> str:
    """``m`` with bill + m × way back = the defaults' bill + m × their way back, per
    provider (``∞``: its way back costs no more than the defaults'; ``–`` for the defaults
    and for a variant that bills more than them without it)."""
    out = []
    for kind in BILLS:
        mine, theirs = (x["replay"]["billing"][kind] for x in (s, defaults))
        gap = theirs["cost_vs_direct"] - mine["cost_vs_direct"]
        extra = (mine["way_back"]["cost_vs_direct"] - mine["cost_vs_direct"]) \
            - (theirs["way_back"]["cost_vs_direct"] - theirs["cost_vs_direct"])
        out.append("–" if s is defaults or gap <= 0 else "∞" if extra <= 0 else f"{gap / extra:.1f}×")
    return " / ".join(out)


def way_back(names: list[str]) -> str:
    """The defaults and each variant of one replay: the frontier with the way back."""
    rows = []
    for name in names:
        report = read(name)
        for result in report["files"].values():
            defaults = result["systems"]["engine"]
            for system, s in result["systems"].items():
                if system == "none":
                    continue
                label = system_label(report, system)
                rows.append([label if system == "engine" else f"{system}: {label}", signed(-100 * s["reduction"][PRIMARY], "%"),
                             _evidence(s), *[_bill(s, k) for k in BILLS], _took(s), _worst(s),
                             break_even(s, defaults)])
    return table({"columns": ["system", "tokens sent",
                              "next-action evidence: visible → after the way back (OpenAI replay)",
                              "OpenAI: billed vs direct → with the way back",
                              "Anthropic: billed vs direct → with the way back",
                              "recall rounds / re-runs per session, OpenAI replay (in all)",
                              "worst session with the way back (OpenAI / Anthropic)",
                              "break-even against the defaults (OpenAI / Anthropic)"],
                  "align": ["left"] + ["right"] * 7, "rows": rows}) + sources(names)


RENDERERS: dict[str, Callable[[list[str]], str]] = {"way_back": way_back}
