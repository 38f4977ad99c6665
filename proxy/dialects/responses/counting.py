"""How many neutral messages a Responses request makes, found without making them
(``message_count``), so a request over the message cap is refused the translation.

It follows ``ResponsesRequest._read_items``: the instructions (unless the server holds
the history) are one message; a string ``input`` one; each user/system/developer
message and each tool output one; a run of assistant-side items one, a new one starting
at an assistant message that follows a call or another assistant message. Each item is
checked as the translation checks it (``item_kind``), so an invalid one is refused (400)
whether or not the request is over the cap.
"""

from __future__ import annotations

from typing import Any

from context_engine.proxy.errors import BadRequest

CALLS = {"function_call": "arguments", "custom_tool_call": "input"}
RESULTS = {"function_call_output", "custom_tool_call_output"}
ROLES = {"user", "assistant", "system", "developer"}


def kind_of(item: dict[str, Any]) -> str:
    t = item.get("type")
    if t in (None, "message") and isinstance(item.get("role"), str):
        return "content" if item["role"] == "assistant" else "message"
    if t in CALLS:
        return "call"
    if t in RESULTS:
        return "result"
    return "opaque"


def item_kind(i: int, item: Any) -> str:
    """The item's kind, or ``BadRequest`` when it is not a valid input item."""
    if not isinstance(item, dict):
        raise BadRequest(f"input[{i}] must be an object.", param=f"input[{i}]")
    kind = kind_of(item)
    if kind in ("message", "content"):
        if item["role"] not in ROLES or not isinstance(item.get("content"), (str, list)):
            raise BadRequest(f"input[{i}]: a message needs a role (user, assistant, system, "
                             "developer) and string or array content.", param=f"input[{i}]")
    elif kind in ("call", "result") and not isinstance(item.get("call_id"), str):
        raise BadRequest(f"input[{i}]: '{item.get('type')}' needs a string 'call_id'.",
                         param=f"input[{i}].call_id")
    elif kind == "opaque" and not isinstance(item.get("type"), str):
        raise BadRequest(f"input[{i}] has no 'type'.", param=f"input[{i}].type")
    return kind


def message_count(data: dict[str, Any], server_state: str) -> int:
    """The neutral messages of a request whose top level is checked."""
    n = int(isinstance(data.get("instructions"), str) and not server_state)
    items = data.get("input")
    if not isinstance(items, list):
        return n + isinstance(items, str)
    in_run = settled = False  # a run is open; it holds a non-opaque item
    for i, item in enumerate(items):
        kind = item_kind(i, item)
        if kind in ("content", "call", "opaque"):
            if kind == "content" and settled:
                n += 1  # the run so far is one message; this item starts the next
                settled = False
            in_run, settled = True, settled or kind != "opaque"
            continue
        n += 1 + in_run
        in_run = settled = False
    return n + in_run
