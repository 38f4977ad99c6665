"""LoCoMo's ``retrieve`` tables of ``docs/benchmarks.md``, read from the benches' own
``--json`` output under ``docs/results/`` (a missing field is a ``KeyError``):

- ``variants``: ``context-engine bench locomo --by-category --variant NAME:retrieve.OPT=VAL …
  --json OUT``: evidence per category and pooled reduction of the defaults and of each
  variant (one option changed).
- ``crossval``: ``python3 bench/crossval.py [--ablate] --json OUT``: the defaults in sample,
  the cross-validated (held-out) figure, and each ablation (one part fixed off).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from context_engine.bench.docs_format import PRIMARY, pct, read, run_line, table
from context_engine.bench.docs_tables import system_label

CATEGORIES = ("multi-hop", "open-domain", "single-hop", "temporal")


def _pooled(report: dict[str, Any], system: str) -> tuple[int, int, float, dict[str, str]]:
    """Evidence kept, probes, pooled reduction and per-category counts of one system over
    the files of a ``--by-category`` run (one per ``FILE [category]``)."""
    kept = probes = before = after = 0
    cats: dict[str, str] = {}
    for label, result in report["files"].items():
        s = result["systems"][system]
        kept, probes = kept + s["retained"], probes + s["probes"]
        before, after = before + s["tokens_before"][PRIMARY], after + s["tokens_after"][PRIMARY]
        cats[label.rstrip("]").split()[-1]] = f"{s['retained']}/{s['probes']}"
    return kept, probes, 1 - after / before, cats


def variants(names: list[str]) -> str:
    """The defaults, then each variant: the option it changes, reduction, evidence, and
    evidence per category."""
    (name,) = names
    report = read(name)
    systems = next(iter(report["files"].values()))["systems"]
    rows = []
    for system in (s for s in systems if s != "none"):
        kept, probes, reduction, cats = _pooled(report, system)
        bold = "**" if system == "engine" else ""
        rows.append([system_label(report, system), f"{bold}{pct(reduction)}{bold}",
                     f"{bold}{kept}/{probes} ({pct(kept / probes)}){bold}",
                     *[cats[c] for c in CATEGORIES]])
    return table({"columns": ["`retrieve` options", "reduction", "evidence", *CATEGORIES],
                  "align": ["left"] + ["right"] * (2 + len(CATEGORIES)), "rows": rows}) \
        + f"\n\n(Generated from `{report['command']}`, {report['date']}: `docs/results/{name}`.)"


def _crossval_row(label: str, r: dict[str, Any], categories: list[str],
                  delta: int | None = None) -> list[Any]:
    kept = f"{r['kept']}/{r['cases']} ({pct(r['evidence'])})"
    if delta is not None:
        kept += f" ({delta:+d})".replace("-", "−")
    return [label, kept, pct(r["reduction"]),
            *["{}/{}".format(*r["by_category"][c]) for c in categories]]


def crossval(names: list[str]) -> str:
    """In sample, held out, and held out with each ranking part fixed off (``--ablate``),
    then the options each fold chose."""
    (name,) = names
    report = read(name)
    cv = report["crossval"]
    cats = sorted(report["configured_in_sample"]["by_category"])
    rows = [_crossval_row("**defaults**, in sample", report["configured_in_sample"], cats),
            _crossval_row(f"**held out** (choosing at ≥ {pct(report['min_reduction'])} pooled "
                          "reduction)", cv, cats)]
    for part, r in report.get("ablations", {}).items():
        rows.append(_crossval_row(f"held out, without `{part}`", r, cats, r["kept"] - cv["kept"]))
    folds = "; ".join(f"{f['held_out']} {f['kept']}/{f['cases']} "
                      f"({', '.join(f'{k}: {v}' for k, v in f['options'].items()) or 'defaults'})"
                      for f in cv["folds"])
    chosen = ", ".join(f"{k}: {v}" for k, v in cv["all_folds"].items()) or "the defaults"
    groups = "fold" if cv["folds"] and cv["folds"][0]["held_out"].startswith("fold") else "conversation"
    return table({"columns": ["", "evidence", "reduction", *cats],
                  "align": ["left"] + ["right"] * (2 + len(cats)), "rows": rows}) \
        + f"\n\nHeld out per {groups}, with the options chosen without it: {folds}. Chosen " \
          f"on all {groups}s: {chosen}. The run took {report['minutes']:.0f} min." \
        + run_line(report, name)


RENDERERS: dict[str, Callable[[list[str]], str]] = {"variants": variants, "crossval": crossval}
