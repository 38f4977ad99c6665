"""How many neutral messages an Anthropic request makes, found without making them
(``message_count``), so a request over the message cap is refused the translation;
and the checks the count shares with the translation (``MessagesRequest._read``), so
an invalid message is refused (400) whether or not the request is over the cap.

A message of an unknown role is one opaque message; a string content one message; a
block list one ``tool`` message per ``tool_result`` plus the main message when any
other block (or none) is left.
"""

from __future__ import annotations

from typing import Any

from context_engine.proxy.errors import BadRequest

CONTENT = {"text", "image", "document", "search_result"}
# block type -> unit kind, per role (anything else is opaque)
KINDS = {"user": {**dict.fromkeys(CONTENT, "content"), "tool_result": "result"},
         "assistant": {**dict.fromkeys(CONTENT, "content"), "tool_use": "call"}}
ROLES = {"user", "assistant", "system"}  # "system" mid-conversation: a beta of Claude Code's


def bad_message(i: int) -> BadRequest:
    return BadRequest(f"messages.{i}: needs a string 'role' and a string or a list of blocks "
                      "with a string 'type' as 'content'")


def block_kind(i: int, j: int, role: str, blk: Any) -> str:
    """The unit kind of block ``j`` of message ``i``; ``BadRequest`` when it is invalid."""
    t = blk.get("type") if isinstance(blk, dict) else None
    if not isinstance(t, str):
        raise bad_message(i)
    kind = KINDS.get(role, KINDS["user"]).get(t, "opaque")
    if kind in ("call", "result") and not isinstance(blk.get("id" if kind == "call" else "tool_use_id"), str):
        raise BadRequest(f"messages.{i}.content.{j}: {t} needs a string id")
    return kind


def message_count(data: dict[str, Any]) -> int:
    """The neutral messages of a request whose top level is checked (``BadRequest`` on an
    invalid message, as the translation would)."""
    n = int(bool(data.get("system")))
    for i, m in enumerate(data["messages"]):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise bad_message(i)
        role, content = m["role"], m.get("content")
        if role not in ROLES or isinstance(content, str):
            n += 1
        elif isinstance(content, list):
            results = sum(block_kind(i, j, role, blk) == "result" for j, blk in enumerate(content))
            n += results + (results < len(content) or not content)
        else:
            raise bad_message(i)
    return n
