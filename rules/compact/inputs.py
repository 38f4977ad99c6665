"""A cleared assistant turn's long tool inputs.

An agent's old calls can be large: a file written with a heredoc, an edit's new text, a
script. When its turn is cleared at an epoch, each string argument longer than ``limit``
characters keeps its first line and a marker naming its own ``orig:`` id, which
``context_recall`` redeems (as Anthropic's context editing clears tool inputs with
``clear_tool_inputs``)::

    {"command": "cat <<'EOF' > test_fix.py\\n[context-engine:cleared] 41 lines; original: orig:9f8e7d6c5b4a"}

The call keeps its id, its name and every key of its arguments, so it still pairs with
its result and is valid on every API. Arguments that are not a JSON object are left as
they are.

A text-action agent (mini-swe-agent, SWE-agent's text mode) writes its command as a fenced
block in its reply and has no tool calls. Clearing such a turn's text keeps its fenced
blocks (``actions``): the command is what the agent did, as a tool call is for a tool
agent; a long one keeps its first line, and the turn's own ``orig:`` id has the rest.
"""

from __future__ import annotations

import json
from typing import Any

from context_engine.proxy.engine.originals import original_id
from context_engine.proxy.engine.sessions import FENCE

FIRST_LINE_CHARS = 200


def shortened(value: str, marker: str, original: str = "") -> str:
    """``value``'s first line and a marker naming where the rest is: ``original`` (an
    ``orig:`` id), else ``value``'s own id."""
    first = value.split("\n", 1)[0][:FIRST_LINE_CHARS]
    return f"{first}\n{marker} {value.count(chr(10)) + 1} lines; original: {original or original_id(value)}"


def shorten_call(call: Any, limit: int, marker: str) -> tuple[Any, list[str]]:
    """``call`` with its long string arguments shortened, and the values it shortened."""
    fn = call.get("function") if isinstance(call, dict) else None
    if limit <= 0 or not isinstance(fn, dict) or not isinstance(fn.get("arguments"), str):
        return call, []
    try:
        args = json.loads(fn["arguments"])
    except ValueError:
        return call, []
    if not isinstance(args, dict):
        return call, []
    long = [k for k, v in args.items() if isinstance(v, str) and len(v) > limit]
    if not long:
        return call, []
    values = [args[k] for k in long]
    args = {k: shortened(v, marker) if k in long else v for k, v in args.items()}
    return {**call, "function": {**fn, "arguments": json.dumps(args, ensure_ascii=False)}}, values


def fenced(text: str) -> list[str]:
    """The fenced blocks of ``text`` (fence lines included), in order; an unclosed fence
    is no block. Linear time."""
    out: list[str] = []
    start = text.find(FENCE)
    while start != -1:
        body = text.find("\n", start)
        end = text.find(FENCE, body) if body != -1 else -1
        if end == -1:
            break
        out.append(text[start:end + len(FENCE)])
        start = text.find(FENCE, end + len(FENCE))
    return out


def actions(text: str, limit: int, marker: str, original: str) -> str:
    """The fenced blocks of a cleared text-action turn, each with its body shortened to its
    first line when longer than ``limit`` characters (``original``: the turn's ``orig:`` id,
    which holds the rest); empty when ``limit`` is 0 or the turn has none."""
    if limit <= 0:
        return ""
    kept = []
    for block in fenced(text):
        opening, body = block.split("\n", 1)
        body = body[:-len(FENCE)].rstrip("\n")
        if len(body) > limit:
            body = shortened(body, marker, original)
        kept.append(f"{opening}\n{body}\n{FENCE}")
    return "\n".join(kept)
