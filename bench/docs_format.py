"""What every generated table of ``docs/benchmarks.md`` shares: reading a bench's committed
``--json`` output from ``docs/results/``, writing a Markdown table, the line under it that
names the run, and the number formats (``bench/docs_tables.py`` and the modules beside it
render the tables; ``bench/docs_headline.py`` the README's rows)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DIR = Path(__file__).resolve().parent.parent / "docs" / "results"
ALIGN = {"left": "---", "right": "---:", "center": ":---:"}
PRIMARY = "o200k_base"
BILLS = ("openai", "anthropic")


def read(name: str) -> dict[str, Any]:
    report: dict[str, Any] = json.loads((DIR / name).read_text())
    return report


def table(spec: dict[str, Any]) -> str:
    """One table as Markdown: header, alignment row, rows."""
    def line(cells: list[Any]) -> str:
        return "| " + " | ".join(str(c) for c in cells) + " |"

    rows = [line(spec["columns"]), "|" + "|".join(ALIGN[a] for a in spec["align"]) + "|"]
    return "\n".join(rows + [line(r) for r in spec["rows"]])


def source_line(meta: dict[str, Any], name: str, after_date: str, what: str) -> str:
    """The line under a table read from a bench's JSON: its command, date, and the file."""
    return (f"\n\n(`{meta.get('command', '')}`, {meta.get('date', '')}{after_date}; {what} "
            f"`docs/results/{name}`. {meta.get('note', '')})")


def run_line(report: dict[str, Any], name: str) -> str:
    """The line under a table of a bench that records ``command``, ``date``, the 1-minute
    load average when it started (``load``) and a ``note`` on the conditions."""
    return f"\n\n(`{report['command']}`, {report['date']}, load {report['load']:.2f}; the " \
           f"bench's own output in `docs/results/{name}`.{' ' + report['note'] if report['note'] else ''})"


def pct(x: float) -> str:
    return f"{x * 100:.1f}%".replace("-", "−")


def signed(x: float, unit: str) -> str:
    """``+1.2 pt``, ``−0.3%``, ``0.0 pt``: a difference, with a real minus sign."""
    v = round(x, 1)
    return f"{'−' if v < 0 else '+' if v > 0 else ''}{abs(v):.1f}{unit}"


def evidence(s: dict[str, Any]) -> str:
    return f"{pct(s['retention'])} ({s['retained']}/{s['probes']})" if s["probes"] else "–"
