"""Checks a rewritten request must pass before it goes upstream.

- every message is a dict with a known role and valid content for that role;
- no message is empty (a user/system message with no text, an assistant with neither
  content nor tool calls);
- every ``tool`` message answers a ``tool_call`` id of an earlier assistant message, and
  every tool call of an assistant message is answered before the next non-tool message;
- the last user turn is byte-identical to the original's last user turn;
- leading system prompts are unchanged, except that ``zones`` may append one line;
- opaque items (reasoning, thinking, compaction…) stay intact: ``proxy.adapters.opaque``.
"""

from __future__ import annotations

from typing import Any

from proxy.adapters.opaque import opaque_problems

ROLES = {"system", "developer", "user", "assistant", "tool", "function"}


def _content_ok(m: dict[str, Any]) -> bool:
    content = m.get("content")
    if m.get("role") == "assistant":
        has_calls = bool(m.get("tool_calls")) or bool(m.get("function_call"))
        if content is None or content == "":
            return has_calls or "refusal" in m or "audio" in m
    if m.get("role") == "tool":
        return isinstance(content, (str, list))
    if isinstance(content, str):
        return m.get("role") == "assistant" or content != "" or m.get("role") == "function"
    return isinstance(content, list) and len(content) > 0


def problems(messages: Any) -> list[str]:
    """Structural problems of a messages array (empty list when valid)."""
    if not isinstance(messages, list) or not messages:
        return ["messages must be a non-empty array"]
    found: list[str] = []
    open_calls: set[str] = set()
    answered: set[str] = set()
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            found.append(f"messages[{i}]: not a message with a known role")
            continue
        role = m["role"]
        if not _content_ok(m):
            found.append(f"messages[{i}]: empty or malformed content")
        if role == "tool":
            cid = m.get("tool_call_id")
            if cid not in open_calls:
                found.append(f"messages[{i}]: tool result {cid!r} without its tool_call")
            else:
                answered.add(cid)
            continue
        if open_calls - answered:
            missing = sorted(open_calls - answered)
            found.append(f"messages[{i}]: tool_calls {missing} left without results")
        open_calls, answered = set(), set()
        if role == "assistant":
            open_calls = {c.get("id", "") for c in m.get("tool_calls") or () if isinstance(c, dict)}
    if open_calls - answered:
        found.append(f"tool_calls {sorted(open_calls - answered)} left without results")
    return found


def _last_user(messages: list[Any]) -> Any:
    for m in reversed(messages):
        if isinstance(m, dict) and m.get("role") == "user":
            return m
    return None


def _system_prefix(messages: list[Any]) -> list[Any]:
    out = []
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ("system", "developer"):
            break
        out.append(m)
    return out


def _system_kept(before: dict[str, Any], after: dict[str, Any], zone_line: str | None) -> bool:
    if before == after:
        return True
    if zone_line is None or set(before) != set(after) or before.get("role") != after.get("role"):
        return False
    b, a = before.get("content"), after.get("content")
    return isinstance(b, str) and isinstance(a, str) and a == b + "\n\n" + zone_line


def rewrite_problems(
    original: list[Any], rewritten: list[Any], zone_line: str | None = None
) -> list[str]:
    """Problems of a rewrite: structural ones, plus a changed last user turn or system prompt.

    Only problems the rewrite introduced count: a client request that already breaks a
    rule (a dangling tool call, say) is the client's to send as it is.
    """
    before = set(problems(original))
    found = [p for p in problems(rewritten) if p not in before]
    if _last_user(original) != _last_user(rewritten):
        found.append("the last user turn was changed or removed")
    sys_before, sys_after = _system_prefix(original), _system_prefix(rewritten)
    if len(sys_before) != len(sys_after) or not all(
        _system_kept(b, a, zone_line if i == 0 else None)
        for i, (b, a) in enumerate(zip(sys_before, sys_after))
    ):
        found.append("the system prompt was changed")
    found.extend(opaque_problems(original, rewritten))
    return found
