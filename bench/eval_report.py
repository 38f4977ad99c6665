"""What ``context-engine eval`` reports: scores per arm, the paired difference with its
bootstrap interval, tokens and cost per arm, the same per category; as text or JSON.

Scores are percentages (mean token F1 × 100; judge: share CORRECT). Questions whose
request failed in either arm are left out of every score and listed under ``errors``.
Cost is input and output at ``price_model``'s list price (litellm's bundled map), with the
input's cached share from the replay's cache simulation (``sim``: OpenAI prefix caching,
questions in file order) and, when the server reported usage for every request, from
what it reported (``reported``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from context_engine.bench.eval_run import ARMS, Result
from context_engine.bench.eval_score import mean, paired_bootstrap
from context_engine.proxy.billing.pricing import Price, price_for

Score = Callable[[Result, str], float | None]


def _pct(x: float | None) -> float | None:
    return None if x is None else round(100 * x, 2)


def score_block(results: Sequence[Result], score: Score, seed: int) -> dict[str, Any]:
    pairs = [(score(r, "original"), score(r, "rewritten")) for r in results]
    kept = [(a, b) for a, b in pairs if a is not None and b is not None]
    boot = paired_bootstrap([a for a, _ in kept], [b for _, b in kept], seed=seed)
    return {"questions": len(kept), "original": _pct(mean([a for a, _ in kept])),
            "rewritten": _pct(mean([b for _, b in kept])), "diff": _pct(boot["diff"]),
            "ci95": [_pct(boot["low"]), _pct(boot["high"])]}


def _cost(price: Price | None, prompt: int, cached: int, completion: int) -> float | None:
    if price is None:
        return None
    cached = min(cached, prompt)
    return round((prompt - cached) * price.input + cached * price.cached_input
                 + completion * price.output, 6)


def _reported(result: Result, arm: str) -> tuple[int, int] | None:
    usage = result.answers[arm].usage or {}
    prompt = usage.get("prompt_tokens")
    if not isinstance(prompt, int):
        return None
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return prompt, cached if isinstance(cached, int) else 0


def arm_bill(results: Sequence[Result], arm: str, price: Price | None) -> dict[str, Any]:
    completion = sum(r.completion[arm] for r in results)
    prompt = sum(r.tokens[arm] for r in results)
    cached = sum(r.sim_cached[arm] for r in results)
    reported = [_reported(r, arm) for r in results]
    got = [x for x in reported if x is not None]
    bill: dict[str, Any] = {
        "input_tokens": prompt, "output_tokens": completion,
        "sim": {"cached_tokens": cached,
                "cost_usd": _cost(price, prompt, cached, completion),
                "cost_uncached_usd": _cost(price, prompt, 0, completion)},
        "reported": None}
    if got:
        p, c = sum(x[0] for x in got), sum(x[1] for x in got)
        bill["reported"] = {"requests": len(got), "input_tokens": p, "cached_tokens": c,
                            "cost_usd": _cost(price, p, c, completion) if len(got) == len(results)
                            else None}
    return bill


def summarize(results: Sequence[Result], price_model: str, judged: bool,
              seed: int = 0) -> dict[str, Any]:
    ok = [r for r in results if r.error is None]
    price = price_for(price_model)

    def scores(group: Sequence[Result]) -> dict[str, Any]:
        out = {"f1": score_block(group, lambda r, arm: r.f1[arm], seed)}
        if judged:
            out["judge"] = score_block(group, lambda r, arm: r.judge.get(arm), seed)
        return out

    report: dict[str, Any] = {
        "questions": len(results), "scored": len(ok), "price_model": price_model,
        "priced": price is not None, **scores(ok),
        "bill": {arm: arm_bill(ok, arm, price) for arm in ARMS},
        "failed_open": sum(r.failed_open for r in ok),
        "categories": {cat: {"questions": sum(r.question.category == cat for r in ok),
                             **scores([r for r in ok if r.question.category == cat])}
                       for cat in sorted({r.question.category for r in ok})},
        "errors": [{"id": r.question.id, "error": r.error} for r in results if r.error],
        "per_question": [_row(r) for r in results],
    }
    return report


def _row(r: Result) -> dict[str, Any]:
    return {"id": r.question.id, "category": r.question.category, "gold": list(r.question.golds),
            "answers": {arm: r.answers[arm].text for arm in ARMS},
            "f1": {arm: round(r.f1[arm], 4) for arm in ARMS},
            "judge": dict(r.judge) or None, "tokens": dict(r.tokens),
            "messages_sent": r.messages_sent, "error": r.error}


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f}"


def _cells(block: dict[str, Any]) -> str:
    low, high = block["ci95"]
    ci = f"[{_fmt(low)}, {_fmt(high)}]"
    return (f"{_fmt(block['original']):>6} {_fmt(block['rewritten']):>6} "
            f"{_fmt(block['diff']):>6} {ci:<16}")


def _score_rows(report: dict[str, Any], judged: bool) -> list[str]:
    cols = f"{'orig':>6} {'rewr':>6} {'diff':>6} {'95% CI':<16}"
    rows = [f"  {'':<23}{'token F1 (%)':<38}" + ("judge correct (%)" if judged else ""),
            f"  {'':<16} {'n':>4}  {cols}" + (f" {cols}" if judged else "")]
    for name, block in [("all", report)] + list(report["categories"].items()):
        line = f"  {name[:16]:<16} {block['f1']['questions']:>4}  {_cells(block['f1'])}"
        rows.append(line + (f" {_cells(block['judge'])}" if judged else ""))
    return [row.rstrip() for row in rows]


def render(report: dict[str, Any]) -> str:
    lines = [report["command"],
             f"{report['scored']} of {report['questions']} questions scored; model "
             f"{report['model']} at {report['base_url']}; rules: {', '.join(report['rules']) or 'none'}"
             + (f"; {report['failed_open']} rewrites failed open" if report["failed_open"] else ""),
             ("Scores, with rewriting and without (diff = rewritten - original, paired "
              "bootstrap 95% interval):")]
    lines += _score_rows(report, "judge" in report)
    lines.append("Tokens and cost per arm:")
    for arm in ARMS:
        b = report["bill"][arm]
        sim = b["sim"]
        cost = "" if sim["cost_usd"] is None else (
            f", ${sim['cost_usd']:.4f} with cache (${sim['cost_uncached_usd']:.4f} without)")
        lines.append(f"  {arm:<9} input {b['input_tokens']:,} tokens (cached "
                     f"{sim['cached_tokens']:,}), output {b['output_tokens']:,}{cost}")
        rep = b["reported"]
        if rep:
            lines.append(f"  {'':<9} server-reported input {rep['input_tokens']:,} (cached "
                         f"{rep['cached_tokens']:,}) on {rep['requests']} requests"
                         + ("" if rep["cost_usd"] is None else f", ${rep['cost_usd']:.4f}"))
    before, after = (report["bill"][arm]["input_tokens"] for arm in ARMS)
    costs = [report["bill"][arm]["sim"]["cost_usd"] for arm in ARMS]
    if before:
        lines.append(f"  input tokens {100 * (after / before - 1):+.1f}%"
                     + (f", cost {100 * (costs[1] / costs[0] - 1):+.1f}%" if costs[0] else "")
                     + f"; priced as {report['price_model']}"
                     + ("" if report["priced"] else " (no price known)"))
    for err in report["errors"][:10]:
        lines.append(f"  error {err['id']}: {err['error']}")
    return "\n".join(lines)


def write_json(report: dict[str, Any], path: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(report, fh, indent=2, ensure_ascii=False)
        fh.write("\n")
