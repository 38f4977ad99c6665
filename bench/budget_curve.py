"""The memory budget's curve on LoCoMo: reduction against evidence, per category.

``python3 bench/budget_curve.py [--budgets 1000,1500,…] [--png docs/memory_budget.png] [--json OUT]``

``retrieve.max_snippet_tokens`` is the knob: the most tokens one memory zone may hold.
For each budget the configured rules run over every LoCoMo case (``bench/memory_eval.py``:
full hybrid search, every turn embedded), and the script prints one Markdown row per
budget (pooled reduction, evidence kept, and per category) and, with ``--png``, draws
the curve (needs matplotlib: ``pip install -e '.[dev]'``); ``--json`` keeps the points
with the command and date (``docs/results/budget_curve.json`` renders the benchmark page's table). ``broad_budget``, when set,
scales with the knob (the configured ratio of the two is kept). Run it alone on an idle
machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from context_engine.bench.cli import without_outputs
from context_engine.bench.memory_eval import DEFAULT_STORE, Evaluator, Score, load_locomo, score

BUDGETS = (800, 1200, 1600, 2000, 2400, 3000, 4000, 6000)


def options_for(budget: int, configured: Mapping[str, Any]) -> dict[str, Any]:
    """``retrieve`` options for a zone budget (``broad_budget`` keeps its ratio)."""
    base = int(configured.get("max_snippet_tokens", 2000))
    broad = int(configured.get("broad_budget", 0))
    out: dict[str, Any] = {"max_snippet_tokens": budget}
    if broad:
        out["broad_budget"] = round(broad * budget / base)
    if budget == base:
        return {}
    return out


def table(points: list[tuple[int, Score]], categories: list[str]) -> str:
    head = "| `max_snippet_tokens` | reduction | evidence | " + " | ".join(categories) + " |"
    rule = "|---:|---:|---:|" + "---:|" * len(categories)
    lines = [head, rule]
    for budget, s in points:
        cats = " | ".join("{}/{}".format(*s.by_category.get(c, (0, 0))) for c in categories)
        lines.append(f"| {budget:,} | {100 * s.reduction:.1f}% | {100 * s.evidence:.1f}% | {cats} |")
    return "\n".join(lines)


def plot(points: list[tuple[int, Score]], categories: list[str], path: str, default: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.6), dpi=110)
    xs = [100 * s.reduction for _, s in points]
    ax.plot(xs, [100 * s.evidence for _, s in points], "k-o", lw=2.2, label="all questions")
    for cat in categories:
        ys = [100 * s.by_category[cat][0] / s.by_category[cat][1] for _, s in points]
        ax.plot(xs, ys, "--.", lw=1.2, label=cat)
    for (budget, s) in points:
        ax.annotate(f"{budget:,}", (100 * s.reduction, 100 * s.evidence), fontsize=7,
                    textcoords="offset points", xytext=(3, 5),
                    weight="bold" if budget == default else "normal")
    ax.set_xlabel("token reduction (%)")
    ax.set_ylabel("questions whose evidence stays visible (%)")
    ax.set_title("LoCoMo dev: memory budget (retrieve.max_snippet_tokens, labels)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})  # no version stamp: same data, same bytes
    plt.close(fig)


async def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="locomo")
    ap.add_argument("--store", default=DEFAULT_STORE)
    ap.add_argument("--config", default=None)
    ap.add_argument("--budgets", default=",".join(map(str, BUDGETS)))
    ap.add_argument("--png", default=None, help="write the plot here (needs matplotlib)")
    ap.add_argument("--json", default=None, metavar="OUT", help="write the points, command and date")
    args = ap.parse_args(argv)
    ev = Evaluator(load_locomo(args.data), args.store, args.config)
    configured = ev.settings({}).rule_options["retrieve"]
    default = int(configured.get("max_snippet_tokens", 2000))
    budgets = sorted({int(b) for b in args.budgets.split(",") if b.strip()} | {default})
    points = [(b, score(await ev.rows(options_for(b, configured)))) for b in budgets]
    categories = sorted({c for _, s in points for c in s.by_category})
    print(table(points, categories))
    if args.json:
        shown = without_outputs(argv if argv is not None else sys.argv[1:], ("--json", "--store"))
        report = {"command": " ".join(["python3 bench/budget_curve.py", *shown]),
                  "date": time.strftime("%Y-%m-%d"), "data": Path(args.data).name,
                  "default": default, "categories": categories,
                  "points": [{"budget": b, "reduction": round(s.reduction, 4), "kept": s.kept,
                              "cases": s.cases, "by_category": {c: list(v) for c, v in
                                                                s.by_category.items()}}
                             for b, s in points]}
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")  # noqa: ASYNC240 (the run is over)
    if args.png:
        plot(points, categories, args.png, default)
        print(f"wrote {args.png}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
