"""``context-engine report --quality``: what the rewrite costs the agent, from the ledger.

Per session (its rows in order): turns (requests) and tasks (requests opening with the
user's message), tokens, re-reads of results the proxy cleared or shortened (by the rule
that changed them) against repeat reads of results sent whole (the agent's base rate),
``context_recall`` calls and what they brought back, tool-call format errors right after
a rewritten request, 4xx answers to requests the proxy changed, and how the session
ended:

- ``stop``: the last reply ended the turn (``stop``/``end_turn``; for Responses and
  Gemini, whose finish reason does not say whether tools were asked, ``completed``/``STOP``);
- ``error``: the last request was answered with an error;
- ``compaction``: the last request's history was less than half the one before (the
  agent compacted it);
- ``abandoned``: the last reply asked for tools and nothing came for ``ABANDON_S``;
- ``open``: it asked for tools recently (still running).

Sessions are grouped by ``rule``, ``agent``, ``project`` or ``day`` (of their first row).
A rule whose re-read cost exceeds its saving on a session is flagged (``flags``):
``costs.py`` prices both.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from context_engine.proxy.reporting.costs import json_column, rule_flags

BY = ("rule", "agent", "project", "day")
ABANDON_S = 600.0  # a session whose last reply asked for tools, idle this long, was left
STOPS = frozenset({"stop", "end_turn", "stop_sequence", "completed", "STOP"})
TOOL_ASKS = frozenset({"tool_calls", "tool_use", "function_call"})
ENDS = ("stop", "error", "compaction", "abandoned", "open", "other")


def changed(row: dict[str, Any]) -> bool:
    """Whether the proxy sent this request rewritten."""
    return (row.get("arm") == "rewrite" and not row.get("failed_open")
            and (row.get("tokens_sent") or 0) < (row.get("tokens_original") or 0))


def end_of(rows: list[dict[str, Any]], now: float) -> str:
    """How a session (its rows, in order) ended."""
    last = rows[-1]
    if (last.get("status") or 0) >= 400:
        return "error"
    if len(rows) > 1 and (last.get("tokens_original") or 0) * 2 < (rows[-2].get("tokens_original") or 0):
        return "compaction"
    finish = last.get("finish_reason") or ""
    if finish in STOPS:
        return "stop"
    if finish in TOOL_ASKS:
        return "abandoned" if now - (last.get("ts") or 0.0) > ABANDON_S else "open"
    return "other"


@dataclass
class Session:
    """One session's signals."""

    session: str
    arm: str = ""
    agent: str = ""
    project: str = ""
    day: str = ""
    model: str = ""
    requests: int = 0
    tasks: int = 0
    tokens_original: int = 0
    tokens_sent: int = 0
    rereads: int = 0
    reread_tokens: int = 0
    reread_turns: int = 0
    repeat_reads: int = 0
    repeat_read_tokens: int = 0
    recall_calls: int = 0
    recall_tokens: int = 0
    format_errors: int = 0
    format_errors_after_rewrite: int = 0
    rewrite_errors: int = 0
    end: str = ""
    rules: dict[str, list[int]] = field(default_factory=dict)  # rule -> [re-reads, tokens]

    @property
    def harm(self) -> int:
        """Errors after a rewrite: 4xx on a changed request, format errors after one."""
        return self.rewrite_errors + self.format_errors_after_rewrite


def session_of(key: str, rows: list[dict[str, Any]], now: float) -> Session:
    first = rows[0]
    s = Session(key, str(first.get("arm") or ""), str(first.get("agent") or ""),
                str(first.get("project") or ""),
                datetime.fromtimestamp(first.get("ts") or 0.0, UTC).strftime("%Y-%m-%d"),
                str(first.get("model") or ""), requests=len(rows), end=end_of(rows, now))
    before: dict[str, Any] | None = None
    for r in rows:
        s.tasks += bool(r.get("user_turn"))
        s.tokens_original += r.get("tokens_original") or 0
        s.tokens_sent += (r.get("tokens_original") if r.get("arm") == "shadow" else r.get("tokens_sent")) or 0
        for name in ("rereads", "reread_tokens", "reread_turns", "repeat_reads", "repeat_read_tokens",
                     "recall_calls", "recall_tokens", "format_errors"):
            setattr(s, name, getattr(s, name) + int(r.get(name) or 0))
        if r.get("format_errors") and before is not None and changed(before):
            s.format_errors_after_rewrite += int(r["format_errors"])
        s.rewrite_errors += bool(r.get("rewrite_error"))
        for rule, (n, tokens) in json_column(r.get("reread_rules")).items():
            got = s.rules.setdefault(rule, [0, 0])
            got[0], got[1] = got[0] + int(n), got[1] + int(tokens)
        before = r
    s.tasks = max(1, s.tasks)
    return s


def by_session(rows: Iterable[dict[str, Any]], now: float | None = None) -> list[Session]:
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        grouped[str(r.get("session") or "")].append(r)
    latest = now if now is not None else max((r.get("ts") or 0.0 for g in grouped.values() for r in g),
                                             default=0.0)
    return [session_of(k, g, latest) for k, g in grouped.items()]


def totals(key: str, sessions: list[Session]) -> dict[str, Any]:
    """The signals of a group of sessions."""
    n = len(sessions)
    t: dict[str, Any] = {"key": key, "sessions": n}
    for name in ("requests", "tasks", "tokens_original", "tokens_sent", "rereads", "reread_tokens",
                 "reread_turns", "repeat_reads", "repeat_read_tokens", "recall_calls", "recall_tokens",
                 "format_errors", "format_errors_after_rewrite", "rewrite_errors"):
        t[name] = sum(getattr(s, name) for s in sessions)
    t["tokens_saved"] = t["tokens_original"] - t["tokens_sent"]
    t["turns_per_session"] = t["requests"] / n if n else 0.0
    t["turns_per_task"] = t["requests"] / t["tasks"] if t["tasks"] else 0.0
    t["tokens_per_session"] = t["tokens_sent"] / n if n else 0.0
    t["tokens_per_task"] = t["tokens_sent"] / t["tasks"] if t["tasks"] else 0.0
    t["rereads_per_session"] = t["rereads"] / n if n else 0.0
    t["reread_turns_mean"] = t["reread_turns"] / t["rereads"] if t["rereads"] else None
    t["ends"] = {e: sum(s.end == e for s in sessions) for e in ENDS}
    return t


def by_rule(rows: list[dict[str, Any]], sessions: list[Session],
            flags: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per rule: tokens it saved (requests sent rewritten), the re-reads it caused."""
    saved: dict[str, int] = defaultdict(int)
    for r in rows:
        if r.get("arm") != "shadow" and not r.get("failed_open"):
            for rule, n in json_column(r.get("rule_savings")).items():
                saved[rule] += int(n or 0)
    out = []
    for rule in sorted(set(saved) | {k for s in sessions for k in s.rules}):
        n = sum(s.rules.get(rule, [0, 0])[0] for s in sessions)
        tokens = sum(s.rules.get(rule, [0, 0])[1] for s in sessions)
        out.append({"key": rule, "tokens_saved": saved.get(rule, 0), "rereads": n, "reread_tokens": tokens,
                    "sessions_with_rereads": sum(bool(s.rules.get(rule)) for s in sessions),
                    "sessions_flagged": sum(f["rule"] == rule for f in flags)})
    return out


def build(rows: list[dict[str, Any]], by: str = "rule", now: float | None = None) -> dict[str, Any]:
    """The quality report as data."""
    sessions = by_session(rows, now)
    flags = rule_flags(rows)
    data: dict[str, Any] = {"by": by, "overall": totals("all", sessions), "flags": flags,
                            "rewrite_errors": [
                                {"session": r.get("session"), "status": r.get("status"),
                                 "error": str(r.get("error") or "")[:300]}
                                for r in rows if r.get("rewrite_error")][:20]}
    if by == "rule":
        data["rows"] = by_rule(rows, sessions, flags)
    else:
        groups: dict[str, list[Session]] = defaultdict(list)
        for s in sessions:
            groups[str(getattr(s, by)) or "(none)"].append(s)
        data["rows"] = [totals(k, g) for k, g in sorted(groups.items())]
    data["sessions"] = [asdict(s) for s in sorted(sessions, key=lambda s: -s.rereads)[:20]]
    return data


def over_time(rows: list[dict[str, Any]], bucket: str) -> dict[str, Any]:
    """``/stats``' quality section: per ``bucket`` (hour|day, UTC) the tokens the rules
    removed against the re-reads and recall calls (the dashboard plots them), and the
    totals with the rules' re-reads."""
    fmt = "%Y-%m-%dT%H:00Z" if bucket == "hour" else "%Y-%m-%d"
    slots: dict[str, dict[str, Any]] = {}
    for r in rows:
        key = datetime.fromtimestamp(r.get("ts") or 0.0, UTC).strftime(fmt)
        s = slots.setdefault(key, {"key": key, "tokens_saved": 0, "rereads": 0, "reread_tokens": 0,
                                   "repeat_reads": 0, "recall_calls": 0, "recall_tokens": 0})
        if r.get("arm") != "shadow":
            s["tokens_saved"] += (r.get("tokens_original") or 0) - (r.get("tokens_sent") or 0)
        for name in ("rereads", "reread_tokens", "repeat_reads", "recall_calls", "recall_tokens"):
            s[name] += int(r.get(name) or 0)
    sessions = by_session(rows)
    return {"bucket": bucket, "rows": [slots[k] for k in sorted(slots)],
            "overall": totals("all", sessions), "by_rule": by_rule(rows, sessions, [])}
