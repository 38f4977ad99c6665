"""The README's headline rows: each names a bench output under ``docs/results/`` and what
to read from it (``bench/docs_format.py`` reads the files); a row that names none was typed
in from an earlier run and says so."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from context_engine.bench import docs_format as t


def _engine(h: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    report = t.read(h["file"])
    result = report["files"][h["data"]]
    return report, result, result["systems"][h.get("system", "engine")]


def bill_figures(h: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    report, result, s = _engine(h)
    o, a = (s["replay"]["billing"][k]["cost_vs_direct"] for k in t.BILLS)
    return f"{o:.3f}× direct (OpenAI), {a:.3f}× (Anthropic)", \
        {"date": report["date"], "cases": result["cases"], "requests": s["requests"]}


def way_back_figures(h: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The bill with the agent's way back to cleared evidence (``bench/reread.py``)."""
    report, result, s = _engine(h)
    bills = s["replay"]["billing"]
    o, a = (bills[k]["way_back"]["cost_vs_direct"] for k in t.BILLS)
    w = bills["openai"]["way_back"]
    per = w["per_session"]
    return (f"{o:.3f}× direct (OpenAI), {a:.3f}× (Anthropic), with {per['recall_rounds']:.2f} "
            f"recall rounds and {per['rereads']:.2f} re-run commands per session"), \
        {"date": report["date"], "cases": result["cases"], "requests": s["requests"]}


def evidence_figures(h: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    report, result, s = _engine(h)
    return f"{t.evidence(s)} at {t.pct(s['reduction'][t.PRIMARY])} fewer input tokens", \
        {"date": report["date"], "cases": result["cases"], "probes": s["probes"]}


def cold_figures(h: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    report = t.read(h["file"])
    parts: list[str] = []
    for data, label in h["data"].items():
        cold, warm = (report["files"][data]["summary"][m] for m in ("cold", "warm"))
        p95 = f", p95 +{cold['added_ms_p95']:.0f} ms"
        opened = [f"{n} {arm}" for arm, n in (("cold", cold.get("failed_open", 0)),
                                               ("warm", warm.get("failed_open", 0))) if n]
        failed = f"; failed open on the deadline, counted as kept: {', '.join(opened)}" if opened else ""
        parts.append(f"{label} {t.pct(cold['evidence_share'])} at {t.pct(cold['reduction'])} fewer "
                     f"tokens{p95} (warm: {t.pct(warm['evidence_share'])}{failed})")
    return "; ".join(parts), {"date": report["date"]}


def crossval_figures(h: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``bench/crossval.py``: the held-out figure of each memory file, beside the defaults'
    in-sample one (``h["files"]``: label → JSON); the date is the latest run's."""
    parts, dates = [], []
    for label, name in h["files"].items():
        report = t.read(name)
        held, inside = report["crossval"], report["configured_in_sample"]
        parts.append(f"{label} {t.pct(held['evidence'])} at {t.pct(held['reduction'])} fewer tokens "
                     f"(defaults in sample: {t.pct(inside['evidence'])})")
        dates.append(report["date"])
    return "; ".join(parts), {"date": max(dates)}


def eval_figures(h: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    report = t.read(h["file"])
    f1, bill = report["f1"], report["bill"]
    low, high = f1["ci95"]
    costs = [bill[arm]["sim"]["cost_usd"] for arm in ("original", "rewritten")]
    return (f"{t.signed(f1['diff'], '')} points of token F1 [{t.signed(low, '')}, {t.signed(high, '')}] "
            f"for {t.signed(100 * (costs[1] / costs[0] - 1), '%')} cost"), \
        {"date": report["date"], "questions": f1["questions"]}


def load_figures(h: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``bench/load.py``: the default rules' added latency beside the passthrough floor's
    (medians of the rounds), named by the phases ``h["phases"]`` (proxy, floor)."""
    report = t.read(h["file"])
    proxy, floor = (report[p]["added_ms_median_of_rounds"] for p in h["phases"])
    return (f"{proxy['p50']:.1f} ms p50, {proxy['p95']:.0f} ms p95 (passthrough floor "
            f"{floor['p50']:.1f} / {floor['p95']:.0f} ms)"), \
        {"date": report["_about"]["date"], "sessions": report["args"]["sessions"]}


HEADLINES: dict[str, Callable[[dict[str, Any]], tuple[str, dict[str, Any]]]] = {
    "bill": bill_figures, "way_back": way_back_figures, "evidence": evidence_figures,
    "cold_memory": cold_figures, "crossval": crossval_figures, "eval": eval_figures,
    "load": load_figures}


def headline_row(h: dict[str, Any]) -> tuple[str, str, str]:
    """What, result and date of one README row: read from its bench output when it names one
    (``what`` may cite the run's ``{cases}``, ``{requests}``, ``{probes}``), else typed in
    from an earlier run and marked so."""
    if "from" not in h:
        return h["what"], f"{h['result']} (transcribed, not regenerated: {h['why']})", h["date"]
    result, facts = HEADLINES[h["from"]](h)
    return h["what"].format(**{k: f"{v:,}" for k, v in facts.items() if k != "date"}), \
        result, facts["date"]
