"""Cut a recorded session into cases and derive their probes (long_traces conventions).

A session is cut at up to three assistant tool-call messages (about 40%, 70% and 95% of
its calls; a cut moves to the nearest call that has a ``next_action`` value). The case
holds the history before that message; the message itself is ``meta.next_step``.

``next_action`` values are the leaf values of the next call's arguments (numbers in
their text form) and the ids/URLs/numbers inside longer string arguments, that appear
verbatim in an earlier tool output or user turn, but not in the system prompt, the task
(first user message) or the last 4 messages, and in at most 3 older messages.
"""

from __future__ import annotations

import json
import re
from typing import Any

POINTS = (0.40, 0.70, 0.95)
MAX_PROBES = 10
RECENT = 4
MAX_HOLDERS = 3
TOKEN = re.compile(r"https?://[^\s)\]\"'>`,]+|`([^`\n]{3,80})`|[\w#@.:/-]*\d[\w#@.:/-]*")


def _leaves(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _leaves(v)]
    if isinstance(value, list):
        return [s for v in value for s in _leaves(v)]
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, (int, float)):
        return [json.dumps(value)]
    text = str(value)
    if len(text) <= 80 and "\n" not in text:
        return [text]
    return [(m.group(1) or m.group(0)).rstrip(".,:;") for m in TOKEN.finditer(text)]


def call_values(message: dict[str, Any]) -> list[str]:
    """Candidate strings of an assistant message's tool-call arguments, first-seen order."""
    seen: dict[str, None] = {}
    for call in message.get("tool_calls") or ():
        for s in _leaves(json.loads(call["function"]["arguments"])):
            if len(s) >= 3 and re.search(r"\w", s):
                seen.setdefault(s, None)
    return list(seen)


def probe_values(messages: list[dict[str, Any]], step: int) -> list[str]:
    """The ``next_action`` values of the call at ``messages[step]`` (at most ``MAX_PROBES``)."""
    first_user = next(i for i, m in enumerate(messages) if m["role"] == "user")
    banned = [str(m.get("content") or "") for m in messages[: first_user + 1]]
    banned += [json.dumps(m, ensure_ascii=False) for m in messages[max(0, step - RECENT): step]]
    out = []
    for value in call_values(messages[step]):
        if any(value in text for text in banned) or (" " in value and not any(ch.isdigit() for ch in value)):
            continue  # prose (a search query, a title) is not an identifier the agent must carry
        holders = [m for m in messages[first_user + 1: step - RECENT]
                   if m["role"] in ("tool", "user") and value in str(m.get("content") or "")]
        if 1 <= len(holders) and len(_all_holders(messages, first_user, step, value)) <= MAX_HOLDERS:
            out.append(value)
    return out[:MAX_PROBES]


def _all_holders(messages: list[dict[str, Any]], first_user: int, step: int, value: str) -> list[int]:
    return [i for i in range(first_user + 1, step - RECENT)
            if value in json.dumps(messages[i], ensure_ascii=False) or value in str(messages[i].get("content") or "")]


def cut_points(messages: list[dict[str, Any]]) -> list[int]:
    """Message indices of the cuts: up to three distinct assistant tool-call messages."""
    steps = [i for i, m in enumerate(messages) if m["role"] == "assistant" and m.get("tool_calls")]
    before = [sum(len(messages[j]["tool_calls"]) for j in steps[:n]) for n in range(len(steps))]
    has = {i: bool(probe_values(messages, i)) for i in steps}
    window = max(3, len(steps) // 8)
    cuts: list[int] = []
    for share in POINTS:
        k = min(range(len(steps)), key=lambda n: (abs(before[n] - share * before[-1]), n))
        near = sorted(range(max(0, k - window), min(len(steps), k + window + 1)), key=lambda j: (abs(j - k), j))
        pick = next((steps[j] for j in near if has[steps[j]] and steps[j] not in cuts), steps[k])
        if pick not in cuts:
            cuts.append(pick)
    return sorted(cuts)


def task_lines(task: str, n: int = 2) -> list[str]:
    """Distinctive lines of the task: the longest ones, in task order."""
    lines = [ln.strip() for ln in task.splitlines() if len(ln.strip()) >= 30]
    keep = set(sorted(lines, key=lambda ln: (-len(ln), ln))[:n])
    return [ln for ln in lines if ln in keep]


def preview(message: dict[str, Any]) -> str:
    call = message["tool_calls"][0]["function"]
    return f"{call['name']}({call['arguments'][:100]})"


def probes(messages: list[dict[str, Any]], step: int) -> list[dict[str, Any]]:
    """``next_action`` probes for the call at ``step`` and ``task`` probes of the first user turn."""
    history = messages[:step]
    task = next(str(m["content"]) for m in history if m["role"] == "user")
    out = [{"kind": "next_action", "question": f"The agent's next call is `{preview(messages[step])}`. "
            "Which value does it take from earlier output?", "answer": v, "evidence": [v]}
           for v in probe_values(messages, step)]
    out += [{"kind": "task", "question": "What is the agent's task?", "answer": ln, "evidence": [ln]}
            for ln in task_lines(task)]
    text = json.dumps(history, ensure_ascii=False)
    for p in out:
        for ev in p["evidence"]:
            assert any(ev in str(m.get("content") or "") for m in history), (ev, text[:0])
    return out
