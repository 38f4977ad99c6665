"""The report of ``eval agent``: per-arm figures with intervals, the paired tests, a verdict.

From the paired task results (``eval_agent_runner.TaskResult``):

- per arm: solve rate, turns, re-reads and recall rounds per task, cost per task and
  per solved task (``sum(cost) / solved``), each with a 95% bootstrap interval over tasks;
- paired, proxy against direct: McNemar's exact p on the discordant pairs, TOST of the
  solve-rate difference against ``±margin`` (Agresti-Min; its 90% interval at alpha 0.05), the
  differences in turns and re-reads per task and the ratio of cost per solved task, with
  paired bootstrap intervals (tasks resampled with both arms);
- the rules' savings in the proxy arm (``compact`` > 0 shows the A/B is not vacuous), and
  the proxy arm's own estimate of the direct cost (``row_bill``'s *original*) against what
  the direct arm billed: the bill estimate checked on the same tasks (the trajectories
  differ where the rewrite changed what the agent did).

Every interval uses ``seed``: the same results give the same report, byte for byte.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from context_engine.bench import eval_agent_stats as st
from context_engine.bench.eval_agent_runner import TaskResult

ARM_FIELDS = ("turns", "rereads", "recall_rounds")


def _iv(interval: st.Interval | None) -> list[float] | None:
    return None if interval is None else [round(interval[0], 6), round(interval[1], 6)]


def _arm(results: Sequence[TaskResult], arm: str, seed: int) -> dict[str, Any]:
    rs = [t.arms[arm] for t in results]
    solved = [1.0 if r.solved else 0.0 for r in rs]
    out: dict[str, Any] = {"tasks": len(rs), "solved": int(sum(solved)),
                           "solve_rate": sum(solved) / len(rs), "solve_rate_ci": _iv(st.mean_interval(solved, seed))}
    for name in ARM_FIELDS:
        values = [float(getattr(r, name)) for r in rs]
        out[name] = sum(values) / len(values)
        out[name + "_ci"] = _iv(st.mean_interval(values, seed))
    costs = [r.cost for r in rs]
    if all(c is not None for c in costs):
        cost = [float(c or 0.0) for c in costs]
        out.update(cost=sum(cost), cost_per_task=sum(cost) / len(cost),
                   cost_per_task_ci=_iv(st.mean_interval(cost, seed)),
                   cost_per_solved=st.ratio(cost, solved),
                   cost_per_solved_ci=_iv(st.ratio_interval(cost, solved, seed)))
    if all(r.cost_original is not None for r in rs):
        out["cost_original_estimate"] = sum(float(r.cost_original or 0.0) for r in rs)
    savings: dict[str, int] = {}
    for r in rs:
        for rule, saved in r.rule_savings.items():
            savings[rule] = savings.get(rule, 0) + saved
    out["rule_savings"] = dict(sorted(savings.items()))
    out["prompt_tokens"] = sum(r.prompt_tokens for r in rs)
    out["errors"] = sum(r.errors for r in rs)
    out["stops"] = {s: sum(1 for r in rs if r.stop == s) for s in sorted({r.stop for r in rs})}
    return out


def _paired(results: Sequence[TaskResult], margin: float, alpha: float, seed: int) -> dict[str, Any]:
    d = [t.arms["direct"] for t in results]
    p = [t.arms["proxy"] for t in results]
    sd, sp = [1.0 if r.solved else 0.0 for r in d], [1.0 if r.solved else 0.0 for r in p]
    b = sum(1 for x, y in zip(sd, sp) if x and not y)
    c = sum(1 for x, y in zip(sd, sp) if y and not x)
    tost = st.tost_paired_proportions(sd, sp, margin, alpha)
    out: dict[str, Any] = {
        "solved_direct_only": b, "solved_proxy_only": c, "mcnemar_p": st.mcnemar_exact(b, c),
        "solve_rate_difference": tost.difference, "tost": {
            "margin": margin, "alpha": alpha, "p": tost.p, "interval": _iv(tost.interval),
            "equivalent": tost.equivalent}}
    for name in ARM_FIELDS:
        a, bb = [float(getattr(r, name)) for r in d], [float(getattr(r, name)) for r in p]
        out[name + "_difference"] = (sum(bb) - sum(a)) / len(a)
        out[name + "_difference_ci"] = _iv(st.paired_difference(a, bb, seed))
    if all(r.cost is not None for r in d + p):
        cd, cp = [float(r.cost or 0.0) for r in d], [float(r.cost or 0.0) for r in p]
        ratio_d, ratio_p = st.ratio(cd, sd), st.ratio(cp, sp)
        out["cost_per_solved_ratio"] = (None if not ratio_d or ratio_p is None else ratio_p / ratio_d)
        out["cost_per_solved_ratio_ci"] = _iv(st.paired_ratio_interval(cd, sd, cp, sp, seed))
        billed = sum(cd)
        out["cost_ratio"] = sum(cp) / billed if billed else None
        # the proxy's own bill estimate of "what direct would have cost", against what direct billed
        estimates = [r.cost_original for r in p]
        known = [e for e in estimates if e is not None]
        out["estimate_over_direct"] = sum(known) / billed if billed and len(known) == len(estimates) else None
    return out


def summarize(results: Sequence[TaskResult], margin: float, alpha: float = 0.05,
              seed: int = 0) -> dict[str, Any]:
    if not results:
        raise ValueError("no task ran")
    return {"arms": {arm: _arm(results, arm, seed) for arm in ("direct", "proxy")},
            "paired": _paired(results, margin, alpha, seed), "seed": seed,
            "tasks": [t.as_dict() for t in results]}


def _fmt_iv(iv: list[float] | None, pct: bool = False, digits: int = 2) -> str:
    if iv is None:
        return "[n/a]"
    if pct:
        return f"[{iv[0] * 100:.0f}%, {iv[1] * 100:.0f}%]"
    return f"[{iv[0]:.{digits}f}, {iv[1]:.{digits}f}]"


def _money(x: float | None) -> str:
    return "n/a" if x is None else f"${x:.4f}"


def verdict(report: dict[str, Any]) -> str:
    """One line a user can act on."""
    p, tost = report["paired"], report["paired"]["tost"]
    same = (f"equivalent within ±{tost['margin']:g} (TOST p={tost['p']:.3f})" if tost["equivalent"]
            else f"not shown equivalent within ±{tost['margin']:g} (TOST p={tost['p']:.3f})")
    line = (f"solve rate {p['solve_rate_difference']:+.2f} {_fmt_iv(tost['interval'])}: {same}; "
            f"McNemar p={p['mcnemar_p']:.3f}")
    if p.get("cost_per_solved_ratio") is not None:
        line += (f"; cost per solved task {p['cost_per_solved_ratio']:.2f}x "
                 f"{_fmt_iv(p['cost_per_solved_ratio_ci'])}")
    return line + (f"; {p['rereads_difference']:+.2f} re-reads per task {_fmt_iv(p['rereads_difference_ci'])}"
                   f", {p['turns_difference']:+.2f} turns per task {_fmt_iv(p['turns_difference_ci'])}")


def _cells(a: dict[str, Any]) -> list[tuple[str, str]]:
    """One arm's column of the table: (row label, cell)."""
    cells = [("solved", f"{a['solved']}/{a['tasks']} {_fmt_iv(a['solve_rate_ci'], True)}")]
    cells += [(f"{n.replace('_', ' ')} / task", f"{a[n]:.2f} {_fmt_iv(a[n + '_ci'])}") for n in ARM_FIELDS]
    return cells + [
        ("cost / task", f"{_money(a.get('cost_per_task'))} {_fmt_iv(a.get('cost_per_task_ci'), digits=4)}"),
        ("cost / solved task", f"{_money(a.get('cost_per_solved'))} {_fmt_iv(a.get('cost_per_solved_ci'), digits=4)}"),
        ("prompt tokens", str(a["prompt_tokens"])), ("error replies", str(a["errors"]))]


def render(report: dict[str, Any]) -> str:
    lines = [f"eval agent: {report['arms']['direct']['tasks']} tasks, both arms"
             + (f" ({report['command'].strip()})" if report.get("command") else ""), ""]
    lines.append(f"{'':22}{'direct':>28}{'proxy':>28}")
    for (label, direct), (_, proxy) in zip(_cells(report["arms"]["direct"]), _cells(report["arms"]["proxy"])):
        lines.append(f"{label:22}{direct:>28}{proxy:>28}")
    saved = {k: v for k, v in report["arms"]["proxy"]["rule_savings"].items() if v}
    lines += ["", "rule savings (proxy arm, tokens): "
              + (", ".join(f"{k} {v}" for k, v in saved.items()) or "none: the rules never fired")]
    p = report["paired"]
    if p.get("estimate_over_direct") is not None:
        lines.append(f"bill estimate: the proxy arm's ledger put the direct cost at "
                     f"{_money(report['arms']['proxy'].get('cost_original_estimate'))}; the direct arm billed "
                     f"{_money(report['arms']['direct'].get('cost'))} ({p['estimate_over_direct']:.2f}x)")
    lines.append(f"discordant pairs: {p['solved_direct_only']} solved only direct, "
                 f"{p['solved_proxy_only']} only through the proxy")
    lines += ["", "verdict: " + verdict(report)]
    return "\n".join(lines)


def write_json(report: dict[str, Any], path: str) -> None:
    Path(path).write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8")
