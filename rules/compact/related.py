"""Which old results the agent is working from right now.

A coding agent comes back to the files it is editing: it viewed ``related.py`` forty
turns ago, edits it now, and its next command names a line it saw then. At an epoch, a
result whose command names a file that one of the last ``turns`` assistant turns also
names stays whole; the next epoch clears it if the agent has moved on.

A file is a token with a source or config extension (``src/app.py``, ``tox.ini``), as a
path is written in a shell command or a tool's ``file_path``. The command of a tool
result is the call it answers (its arguments); of a harness's observation, the
assistant turn before it.

The pattern is anchored on its extension and has no nested quantifier (linear time).
"""

from __future__ import annotations

import re
from typing import Any

EXTENSIONS = ("py|pyi|ipynb|js|jsx|mjs|ts|tsx|go|rs|java|kt|c|h|cc|cpp|hpp|rb|php|cs|swift|scala|"
              "md|rst|txt|json|yaml|yml|toml|ini|cfg|sh|html|css|sql|xml|lock")
FILE = re.compile(r"(?<![\w./-])/?(?:[\w.-]{1,80}/){0,20}[\w-][\w.-]{0,80}\.(?:" + EXTENSIONS + r")\b")


def files(text: str) -> set[str]:
    """The file names ``text`` mentions."""
    return set(FILE.findall(text))


def _said(m: dict[str, Any]) -> str:
    """An assistant turn's text and its calls' arguments."""
    content = m.get("content")
    parts = [content if isinstance(content, str) else ""]
    parts += [str((c.get("function") or {}).get("arguments") or "")
              for c in m.get("tool_calls") or () if isinstance(c, dict)]
    return "\n".join(parts)


def command_of(messages: list[Any], i: int) -> str:
    """What result ``i`` answers: its call's arguments, or the turn before an observation."""
    m = messages[i]
    if m.get("role") != "tool":
        prev = messages[i - 1] if i > 0 else None
        return _said(prev) if isinstance(prev, dict) and prev.get("role") == "assistant" else ""
    for j in range(i - 1, -1, -1):
        a = messages[j]
        if isinstance(a, dict) and a.get("role") == "assistant":
            return next((str((c.get("function") or {}).get("arguments") or "")
                         for c in a.get("tool_calls") or ()
                         if isinstance(c, dict) and c.get("id") == m.get("tool_call_id")), "")
    return ""


def related(messages: list[Any], results: list[int], turns: int) -> set[int]:
    """The results among ``results`` whose command names a file that one of the last
    ``turns`` assistant turns names (none when ``turns`` is 0)."""
    if turns <= 0:
        return set()
    recent = [m for m in messages if isinstance(m, dict) and m.get("role") == "assistant"][-turns:]
    hot = set().union(*(files(_said(m)) for m in recent)) if recent else set()
    return {i for i in results if hot and files(command_of(messages, i)) & hot}
