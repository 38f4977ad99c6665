"""Tables and README figures read from a bench's own ``--json`` output, committed under
``docs/results/``. The template names one with a line ``{{KIND:FILE[,FILE…]}}``; each
renderer below turns those files into a Markdown table and a line naming the command, the
date and the file of every run it read. A field missing from a file is a ``KeyError``, not
a blank cell: a page is never generated from a run that did not measure what it shows.

- ``single``: ``context-engine bench FILES --json OUT`` (one request per case): reduction
  and evidence kept per data file and system.
- ``apis``: the same for ``--api chat|responses|anthropic`` runs, the engine per wire format.
- ``replay``: ``context-engine bench FILES --replay --anthropic --json OUT``: tokens sent,
  prefix reuse, cost at the cache ratio and the bill under each provider's cache simulator.
- ``ab``: the same replays as an A/B test beside the report's estimate of the original.
- ``budget``: ``python3 bench/budget_curve.py --json OUT``: the memory budget's curve.
- ``answers``: ``context-engine eval --json OUT``: scores with and without the rules.

Latency benches' tables are in ``bench/docs_tables_latency.py``, LoCoMo's ablations and
cross-validation in ``bench/docs_tables_locomo.py``; ``bench/docs_page.py`` joins their
``RENDERERS``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from context_engine.bench.docs_format import (
    BILLS,
    PRIMARY,
    evidence,
    pct,
    read,
    signed,
    table,
)

DATA = {"agent_traces_dev.jsonl": "agent traces", "locomo_dev.jsonl": "LoCoMo",
        "injections_dev.jsonl": "injections", "long_traces_dev.jsonl": "long agent sessions",
        "long_traces_dev.jsonl (text actions)": "long agent sessions, commands as text",
        "longmemeval_dev.jsonl": "LongMemEval"}


def sources(names: list[str]) -> str:
    """The line under a table read from ``context-engine bench --json`` outputs."""
    runs = "; ".join(f"`{r['command']}`, {r['date']}: `docs/results/{n}`"
                     for n, r in ((n, read(n)) for n in names))
    return f"\n\n(Generated from the bench's own output: {runs}.)"


def by_kind(s: dict[str, Any]) -> str:
    """Evidence visible per probe kind (``68/93 next-action, 82/82 task``), else in all."""
    kinds = s["retained_by_kind"]
    if not kinds:
        return f"{s['retained']}/{s['probes']}" if s["probes"] else "–"
    return ", ".join(f"{r}/{n} {k.replace('_', '-')}" for k, (r, n) in kinds.items())


def system_label(report: dict[str, Any], name: str) -> str:
    """``engine`` as the default rules; a variant as the options it changed."""
    if name == "engine":
        return "**default rules**"
    if name == "none":
        return "sent unchanged (`none`)"
    if name in report["variants"]:
        base, changed = report["rule_options"], report["variants"][name]
        diff = [f"{rule}.{k}: {json.dumps(v)}" for rule, opts in changed.items()
                for k, v in opts.items() if base.get(rule, {}).get(k) != v]
        return "`" + ", ".join(diff) + "`" if diff else name
    return name


def _rows(names: list[str], cells: Callable[[dict[str, Any], str, dict[str, Any], dict[str, Any]],
                                            list[Any] | None]) -> list[list[Any]]:
    """Rows of every (file, data file, system), data cell on the first row of a data file."""
    rows = []
    for name in names:
        report = read(name)
        for data, result in report["files"].items():
            first = True
            for system, s in result["systems"].items():
                row = cells(report, system, s, result)
                if row is None:
                    continue
                size = f"{result['cases']}" if report["mode"] != "replay" else \
                    f"{result['cases']} sessions, {s['requests']:,} requests"
                label = f"{DATA.get(data, data)} ({size})" if first else ""
                rows.append([label, *row])
                first = False
    return rows


def single(names: list[str]) -> str:
    """One request per case: reduction, message and tool-result tokens, evidence kept."""
    def cells(report: dict[str, Any], system: str, s: dict[str, Any], _: Any) -> list[Any] | None:
        if system == "none":
            return None
        red = s["reduction"]
        tools = pct(red["tool_results"]) if s["tokens_before"]["tool_results"] else "–"
        return [system_label(report, system), pct(red[PRIMARY]), pct(red["messages"]), tools,
                evidence(s), s["failed_open"]]

    return table({"columns": ["data", "system", "reduction", "message tokens", "tool-result tokens",
                              "evidence kept", "failed open"],
                  "align": ["left", "left", "right", "right", "right", "right", "right"],
                  "rows": _rows(names, cells)}) + sources(names)


def apis(names: list[str]) -> str:
    """The engine through each wire format: one run per ``--api``, rows grouped by data."""
    rows: dict[str, list[list[Any]]] = {}
    for name in names:
        report = read(name)
        for data, result in report["files"].items():
            s = result["systems"]["engine"]
            group = rows.setdefault(data, [])
            group.append(["" if group else f"{DATA.get(data, data)} ({result['cases']})",
                          report["api"], f"{s['reduction'][PRIMARY] * 100:.2f}%",
                          f"{s['reduction']['messages'] * 100:.2f}%",
                          f"{s['retained']}/{s['probes']}", s["failed_open"]])
    return table({"columns": ["data", "API", "reduction", "message tokens", "evidence kept",
                              "failed open"],
                  "align": ["left", "left", "right", "right", "right", "right"],
                  "rows": [r for group in rows.values() for r in group]}) + sources(names)


def billed(s: dict[str, Any], kind: str) -> str:
    """Cost vs direct under one provider's cache, the report's saving minus the bill's, and
    the session billed highest against its own direct bill (runs that record it)."""
    b = s["replay"]["billing"][kind]
    worst = b.get("worst_session")
    most = f"; worst session {worst['cost_vs_direct']:.2f}×" if worst else ""
    return f"{b['cost_vs_direct']:.3f}× ({signed(b['gap_points'], ' pt')}{most})"


def epochs(r: dict[str, Any]) -> str:
    """`` (64 epochs, 0 other breaks)``: a run with compaction epochs (bench runs made
    before the count have none)."""
    if not r.get("epochs"):
        return ""
    return f" ({r['epochs']} epochs, {r['breaks_outside_epochs']} other breaks)"


def replay(names: list[str]) -> str:
    """Every request point replayed: tokens sent, prefix reuse, cost at the cache ratio, the
    bill under each provider's cache simulator, and evidence visible at the cut points.
    ``none`` stays in: its "report − bill" is the report's estimate's own error."""
    def cells(report: dict[str, Any], system: str, s: dict[str, Any], _: Any) -> list[Any] | None:
        r = s["replay"]
        return [system_label(report, system), report["cache_scope"],
                signed(-100 * s["reduction"][PRIMARY], "%"), pct(r["full_prefix_share"]) + epochs(r),
                f"{r['cost_vs_none']:.3f}×", *[billed(s, k) for k in BILLS], by_kind(s)]

    return table({"columns": ["data", "system", "cache shared by", "tokens sent",
                              "requests extending the previous one", "cost vs none",
                              "billed vs direct, OpenAI (report − bill; worst session)",
                              "billed vs direct, Anthropic (report − bill; worst session)", "evidence visible"],
                  "align": ["left", "left", "left", "right", "right", "right", "right", "right",
                            "right"],
                  "rows": _rows(names, cells)}) + sources(names)


def ab(names: list[str]) -> str:
    """The replays' A/B arms (the default rules) beside the report's estimate of the original."""
    def cells(report: dict[str, Any], system: str, s: dict[str, Any], _: Any) -> list[Any] | None:
        if system != "engine":
            return None
        out: list[Any] = [report["cache_scope"]]
        for kind in BILLS:
            b = s["replay"]["billing"][kind]
            out += [f"${b['direct_usd']:.2f} / ${b['billed_usd']:.2f}", pct(b["harness_saving"]),
                    f"${b['report_original_usd']:.2f} ({signed(b['estimate_vs_direct_pct'], '%')})",
                    pct(b["report_saving"])]
        return out

    columns = ["data", "cache shared by"]
    for kind in ("OpenAI", "Anthropic"):
        columns += [f"{kind}: passthrough / rewrite arm", "A/B saving",
                    "estimate of the original (− passthrough arm)", "report saving"]
    return table({"columns": columns, "align": ["left", "left"] + ["right"] * 8,
                  "rows": _rows(names, cells)}) + sources(names)


def budget(names: list[str]) -> str:
    """``bench/budget_curve.py --json``: reduction and evidence per ``max_snippet_tokens``."""
    (name,) = names
    report = read(name)
    rows = []
    for p in report["points"]:
        bold = "**" if p["budget"] == report["default"] else ""
        rows.append([f"{bold}{p['budget']:,}{bold}", pct(p["reduction"]),
                     f"{pct(p['kept'] / p['cases'])} ({p['kept']}/{p['cases']})",
                     *["{}/{}".format(*p["by_category"][c]) for c in report["categories"]]])
    return table({"columns": ["`max_snippet_tokens`", "reduction", "evidence",
                              *report["categories"]],
                  "align": ["right"] * (3 + len(report["categories"])), "rows": rows}) \
        + f"\n\n(Generated from `{report['command']}`, {report['date']}: `docs/results/{name}`.)"


def _millions(before: int, after: int) -> str:
    return f"{before / 1e6:.2f}M → {after / 1e6:.2f}M ({signed(100 * (after / before - 1), '%')})"


def answers(names: list[str]) -> str:
    """``context-engine eval --json OUT``: token F1 with and without the rules (paired
    difference, bootstrap 95% interval), input tokens and simulated cost with caching."""
    (name,) = names
    report = read(name)

    def row(label: str, block: dict[str, Any], arms: tuple[int, int], cost: str) -> list[Any]:
        low, high = block["ci95"]
        return [label, f"{block['original']:.1f}", f"{block['rewritten']:.1f}",
                f"{signed(block['diff'], '')} [{signed(low, '')}, {signed(high, '')}]",
                _millions(*arms), cost]

    bill = report["bill"]
    costs = [bill[arm]["sim"]["cost_usd"] for arm in ("original", "rewritten")]
    rows = [row(f"all ({report['f1']['questions']})", report["f1"],
                (bill["original"]["input_tokens"], bill["rewritten"]["input_tokens"]),
                f"${costs[0]:.2f} → ${costs[1]:.2f} ({signed(100 * (costs[1] / costs[0] - 1), '%')})")]
    for cat, block in report["categories"].items():
        qs = [q for q in report["per_question"] if q["category"] == cat and not q["error"]]
        arms = (sum(q["tokens"]["original"] for q in qs), sum(q["tokens"]["rewritten"] for q in qs))
        rows.append(row(f"{cat} ({block['f1']['questions']})", block["f1"], arms, ""))
    return table({"columns": ["questions", "original", "rewritten", "diff [95% CI]", "input tokens",
                              f"cost with caching ({report['price_model']})"],
                  "align": ["left"] + ["right"] * 5, "rows": rows}) + \
        f"\n\n(Generated from `{report['command']}`, {report['date']}: `docs/results/{name}`.)"


RENDERERS: dict[str, Callable[[list[str]], str]] = {
    "single": single, "apis": apis, "replay": replay, "ab": ab, "budget": budget,
    "answers": answers}
