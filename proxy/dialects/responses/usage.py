"""Usage in the Responses API's shape: the response's ``usage`` (``input_tokens``,
``input_tokens_details.cached_tokens``, ``output_tokens``), its status or
``incomplete_details.reason`` as the finish, its text (``response.output_text.delta``
events, or the ``output_text`` parts of a whole response); a stream ends with
``response.completed``, ``response.incomplete`` or ``response.failed``.
"""

from __future__ import annotations

from typing import Any

from context_engine.proxy.dialects.chat.usage import take_usage as take_chat
from context_engine.proxy.dialects.usage import Usage, as_dict, as_int, as_list

ENDS = frozenset({"response.completed", "response.incomplete", "response.failed"})


def take_usage(u: Usage, obj: Any) -> None:
    if not isinstance(obj, dict):
        return
    kind = obj.get("type") or obj.get("object")
    if not (isinstance(kind, str) and (kind == "response" or kind.startswith("response."))):
        take_chat(u, obj)  # an OpenAI-compatible server answering in chat's shape
        return
    if obj.get("type") == "response.output_text.delta":
        u.add_text(obj.get("delta"))
        return
    resp = obj.get("response") if "response" in obj else obj
    if not isinstance(resp, dict):
        return
    usage = resp.get("usage")
    if isinstance(usage, dict):
        u.prompt_tokens = as_int(usage.get("input_tokens"))
        u.completion_tokens = as_int(usage.get("output_tokens"))
        details = usage.get("input_tokens_details")
        u.cached_tokens = as_int(details.get("cached_tokens")) if isinstance(details, dict) else None
    status = resp.get("status")
    if isinstance(status, str) and status not in ("in_progress", "queued"):
        reason = as_dict(resp.get("incomplete_details")).get("reason")
        u.finish_reason = str(reason or status)
    if obj is resp:  # a whole response body: its text is in the output items
        for item in as_list(resp.get("output")):
            for part in as_list(as_dict(item).get("content")):
                if isinstance(part, dict) and part.get("type") == "output_text":
                    u.add_text(part.get("text"))


def ends(data: bytes, obj: Any) -> bool:
    return isinstance(obj, dict) and obj.get("type") in ENDS
