"""Checks a rewritten request must pass before it goes upstream.

- every message is a dict with a known role and valid content for that role;
- no message is empty (a user/system message with no text, an assistant with neither
  content nor tool calls);
- every ``tool`` message answers a ``tool_call`` id of an earlier assistant message, and
  every tool call of an assistant message is answered before the next non-tool message;
- the last user turn is byte-identical to the original's last user turn;
- every system and developer message, wherever it stands, is kept unchanged and in order
  (``zones`` may append one line to the first message when it is a system prompt);
- every image, audio and file part is kept, or a text reference names it;
- no rewrite puts two user messages next to each other where the client did not;
- pinned messages (``proxy/engine/sessions.py``) are kept: the first user message (the
  task) byte-identical, with no later client message moved before it, and in an agent session every instruction (a user
  message that is not a harness's observation) byte-identical and in order.
- opaque items (reasoning, thinking, compaction…) stay intact: ``context_engine.proxy.engine.opaque``.
"""

from __future__ import annotations

from typing import Any

from context_engine.proxy.engine.messages import is_instruction, media_refs, text_of
from context_engine.proxy.engine.opaque import opaque_problems
from context_engine.proxy.engine.sessions import first_user_index, pinned

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


def _instructions(messages: list[Any]) -> list[Any]:
    return [m for m in messages if is_instruction(m)]


def _system_kept(before: dict[str, Any], after: dict[str, Any], zone_line: str | None) -> bool:
    if before == after:
        return True
    if zone_line is None or set(before) != set(after) or before.get("role") != after.get("role"):
        return False
    b, a = before.get("content"), after.get("content")
    return isinstance(b, str) and isinstance(a, str) and a == b + "\n\n" + zone_line


def _system_problems(original: list[Any], rewritten: list[Any], zone_line: str | None) -> list[str]:
    before, after = _instructions(original), _instructions(rewritten)
    leading = is_instruction(original[0])
    if leading and not (rewritten and is_instruction(rewritten[0])):
        return ["the system prompt was changed"]
    if len(before) != len(after) or not all(
            _system_kept(b, a, zone_line if i == 0 and leading else None)
            for i, (b, a) in enumerate(zip(before, after))):
        return ["a system or developer message was changed or dropped"]
    return []


def _media_problems(original: list[Any], rewritten: list[Any]) -> list[str]:
    wanted = [r for m in original for r in media_refs(m)]
    if not wanted:
        return []
    kept = {r for m in rewritten for r in media_refs(m)}
    missing = [r for r in wanted if r not in kept]
    if missing:
        texts = "\n".join(text_of(m) for m in rewritten if isinstance(m, dict))
        missing = [r for r in missing if r not in texts]
    return [f"media dropped without a reference: {missing[:3]}"] if missing else []


def _user_pairs(messages: list[Any]) -> int:
    roles = [m.get("role") if isinstance(m, dict) else None for m in messages]
    return sum(1 for a, b in zip(roles, roles[1:]) if a == b == "user")


def _pinned_problems(original: list[Any], rewritten: list[Any], agent: bool) -> list[str]:
    first = first_user_index(original)
    if first < 0:
        return []
    task, later = original[first], original[first + 1:]
    at = next((i for i, m in enumerate(rewritten) if m is task), -1)
    if at < 0:
        at = next((i for i, m in enumerate(rewritten) if m == task), -1)
    if at < 0 or any(m in later and m not in original[:first] for m in rewritten[:at]):
        return ["the task (the first user message) was changed or moved"]
    if not agent:
        return []
    wanted = [original[i] for i in pinned(original, True)
              if i > first and original[i].get("role") == "user"]
    it = iter(m for m in rewritten[at + 1:] if isinstance(m, dict) and m.get("role") == "user")
    if not all(any(m == w for m in it) for w in wanted):  # each in order (a subsequence)
        return ["an agent's instruction (a user message) was changed or dropped"]
    return []


def rewrite_problems(
    original: list[Any], rewritten: list[Any], zone_line: str | None = None,
    kind: str = "chat", pins: bool = True,
) -> list[str]:
    """Problems of a rewrite: structural ones, plus a changed last user turn, a changed or
    dropped system/developer message, media lost without a reference, or user messages
    newly put side by side.

    Only problems the rewrite introduced count: a client request that already breaks a
    rule (a dangling tool call, say) is the client's to send as it is.
    """
    before = set(problems(original))
    found = [p for p in problems(rewritten) if p not in before]
    if not isinstance(original, list) or not original or not isinstance(rewritten, list):
        return found
    if _last_user(original) != _last_user(rewritten):
        found.append("the last user turn was changed or removed")
    found += _system_problems(original, rewritten, zone_line)
    found += _media_problems(original, rewritten)
    if _user_pairs(rewritten) > _user_pairs(original):
        found.append("two user messages in a row")
    if pins:  # the bench's baselines (last_n…) drop the task by design
        found += _pinned_problems(original, rewritten, kind == "agent")
    found.extend(opaque_problems(original, rewritten))
    return found
