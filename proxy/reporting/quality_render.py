"""The quality report (``quality.py``) as Rich tables and lines. Strings from the ledger go
in as ``Text``: never markup."""

from __future__ import annotations

from typing import Any


def _f(v: Any, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def _table(data: dict[str, Any]) -> Any:
    from rich.table import Table
    from rich.text import Text

    by = data["by"]
    table = Table(title=f"Context Engine — what the rewrite costs the agent, by {by}")
    if by == "rule":
        cols = ("rule", "tokens saved", "re-reads", "re-read tokens", "sessions with re-reads",
                "sessions flagged")
        for col in cols:
            table.add_column(col, justify="left" if col == "rule" else "right")
        for r in data["rows"]:
            table.add_row(Text(str(r["key"])), f"{r['tokens_saved']:,}", str(r["rereads"]),
                          f"{r['reread_tokens']:,}", str(r["sessions_with_rereads"]),
                          str(r["sessions_flagged"]))
        return table
    columns = (by, "sessions", "turns/session", "turns/task", "tokens/task", "re-reads (tokens)",
            "repeat reads (base)", "recall calls (tokens)", "format errors after rewrite",
            "4xx after rewrite", "ends")
    for col in columns:
        table.add_column(col, justify="left" if col in (by, "ends") else "right")
    for t in data["rows"]:
        table.add_row(Text(str(t["key"])), *_cells(t))
    return table


def _cells(t: dict[str, Any]) -> list[str]:
    ends = ", ".join(f"{k} {v}" for k, v in t["ends"].items() if v)
    return [str(t["sessions"]), f"{t['turns_per_session']:.1f}", f"{t['turns_per_task']:.1f}",
            f"{t['tokens_per_task']:,.0f}", f"{t['rereads']} ({t['reread_tokens']:,})",
            f"{t['repeat_reads']} ({t['repeat_read_tokens']:,})",
            f"{t['recall_calls']} ({t['recall_tokens']:,})", str(t["format_errors_after_rewrite"]),
            str(t["rewrite_errors"]), ends]


def render(data: dict[str, Any]) -> list[Any]:
    """The breakdown table, the overall lines, the flags and the 4xx after a rewrite."""
    from rich.text import Text

    o = data["overall"]
    ends = ", ".join(f"{k} {v}" for k, v in o["ends"].items() if v) or "none"
    lines: list[Any] = [_table(data), (
        f"all: {o['sessions']} sessions, {o['requests']} requests, {o['tasks']} tasks; "
        f"{o['turns_per_session']:.1f} turns and {o['tokens_per_session']:,.0f} input tokens sent per "
        f"session ({o['tokens_saved']:,} saved); ends: {ends}"),
        (f"re-reads of results the proxy cleared or shortened: {o['rereads']} "
         f"({o['reread_tokens']:,} tokens, {_f(o['reread_turns_mean'], '.1f')} turns after the read on "
         f"average), against {o['repeat_reads']} repeat reads of results sent whole (the agent's base "
         f"rate, {o['repeat_read_tokens']:,} tokens)"),
        (f"recall: {o['recall_calls']} context_recall calls brought back {o['recall_tokens']:,} tokens; "
         f"format errors: {o['format_errors']} ({o['format_errors_after_rewrite']} right after a "
         f"rewritten request); 4xx on a changed request: {o['rewrite_errors']}")]
    for f in data["flags"][:20]:
        unit = "$" if f["unit"] == "USD" else ""
        suffix = "" if unit else " input-token equivalents"
        lines.append(Text(f"FLAG {f['rule']} on session {f['session']}: its re-reads "
                          f"({f['reread_tokens']:,} tokens) cost {unit}{f['reread_cost']:.6g}{suffix}, "
                          f"more than it saved there ({unit}{f['saving']:.6g}{suffix})"))
    for e in data["rewrite_errors"]:
        lines.append(Text(f"4xx after a rewrite: session {e['session']}, status {e['status']}: {e['error']}"))
    return lines
