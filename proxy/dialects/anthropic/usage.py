"""Usage in Anthropic Messages' shape: ``message_start`` + ``message_delta`` (or a whole
message): ``input_tokens``, ``cache_read_input_tokens``, ``cache_creation_input_tokens``,
``output_tokens``, summed over ``usage.iterations`` where present; the stop reason and
the text blocks; a stream ends with ``message_stop``.
"""

from __future__ import annotations

from typing import Any

from context_engine.proxy.dialects.chat.usage import take_usage as take_chat
from context_engine.proxy.dialects.usage import Usage, as_dict, as_int, as_list

KINDS = {"message", "message_start", "message_delta", "content_block_delta"}
ITERATION_FIELDS = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens",
                    "output_tokens")


def take_usage(u: Usage, obj: Any) -> None:
    if not isinstance(obj, dict):
        return
    kind = obj.get("type") or obj.get("object")
    if kind not in KINDS:
        take_chat(u, obj)  # an OpenAI-compatible server answering in chat's shape
        return
    if kind == "content_block_delta":
        delta = obj.get("delta")
        if isinstance(delta, dict):
            u.add_text(delta.get("text"))
        return
    msg = obj.get("message") if kind == "message_start" else obj
    if not isinstance(msg, dict):
        return
    usage = msg.get("usage")
    if isinstance(usage, dict) and (not u.iterated or "iterations" in usage):
        summed = sum_iterations(usage)
        u.iterated, usage = summed is not usage, summed
        fresh = as_int(usage.get("input_tokens"))
        read = as_int(usage.get("cache_read_input_tokens"))
        write = as_int(usage.get("cache_creation_input_tokens"))
        if fresh is not None:
            u.prompt_tokens = fresh + (read or 0) + (write or 0)
        if read is not None:
            u.cached_tokens = read
        if write is not None:
            u.cache_write_tokens = write
        if as_int(usage.get("output_tokens")) is not None:
            u.completion_tokens = as_int(usage["output_tokens"])
    stop = as_dict(obj.get("delta")).get("stop_reason") if kind == "message_delta" else msg.get("stop_reason")
    if isinstance(stop, str):
        u.finish_reason = stop
    if kind == "message":
        for block in as_list(msg.get("content")):
            if isinstance(block, dict) and block.get("type") == "text":
                u.add_text(block.get("text"))


def sum_iterations(usage: dict[str, Any]) -> dict[str, Any]:
    """Anthropic's usage with ``iterations`` (server-side compaction runs more than one
    sampling step per request): the top-level counts leave the compaction steps out, and
    what is billed is the sum over the iterations, field by field."""
    steps = usage.get("iterations")
    if not isinstance(steps, list) or not steps or not all(isinstance(i, dict) for i in steps):
        return usage
    summed = dict(usage)
    for key in ITERATION_FIELDS:
        counts = [as_int(i.get(key)) for i in steps]
        if any(c is not None for c in counts):
            summed[key] = sum(c or 0 for c in counts)
    return summed


def ends(data: bytes, obj: Any) -> bool:
    return isinstance(obj, dict) and obj.get("type") == "message_stop"
