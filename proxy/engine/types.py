"""Chat Completions message shapes, as the proxy reads them.

Messages are plain dicts (the JSON the client sent); these TypedDicts document the keys
the rules look at. Unknown keys are kept and forwarded untouched.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

Role = Literal["system", "developer", "user", "assistant", "tool", "function"]


class FunctionCall(TypedDict):
    name: str
    arguments: str


class ToolCall(TypedDict, total=False):
    id: str
    type: str
    function: FunctionCall


class Message(TypedDict, total=False):
    role: Role
    content: str | list[dict[str, Any]] | None
    name: str
    tool_calls: list[ToolCall]
    tool_call_id: str


Messages = list[Message]
