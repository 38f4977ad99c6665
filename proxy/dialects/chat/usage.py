"""Usage in Chat Completions' shape: ``usage.prompt_tokens``, ``completion_tokens`` and
``prompt_tokens_details.cached_tokens`` (cache writes and reads as litellm and
Anthropic's OpenAI-compatible layer report them too), the choices' finish reason and
text; in a whole body or in each chunk of a stream (the last non-null ``usage`` wins).
"""

from __future__ import annotations

from typing import Any

from context_engine.proxy.dialects.usage import Usage, as_list


def take_usage(u: Usage, obj: Any) -> None:
    if not isinstance(obj, dict):
        return
    usage = obj.get("usage")
    if isinstance(usage, dict):
        read_counts(u, usage)
    elif usage is not None:
        u.note(f"usage is a {type(usage).__name__}, not an object")
    for choice in as_list(obj.get("choices")):
        if not isinstance(choice, dict):
            continue
        if isinstance(choice.get("finish_reason"), str) and choice["finish_reason"]:
            u.finish_reason = choice["finish_reason"]
        part = choice.get("delta") or choice.get("message") or {}
        u.add_text(part.get("content") if isinstance(part, dict) else None)


def read_counts(u: Usage, usage: dict[str, Any]) -> None:
    """OpenAI's fields, plus cache writes and reads as litellm and Anthropic's
    OpenAI-compatible layer report them; bad values are noted and ignored."""
    u.prompt_tokens = u.count(usage, "prompt_tokens")
    u.completion_tokens = u.count(usage, "completion_tokens")
    details = usage.get("prompt_tokens_details")
    if details is not None and not isinstance(details, dict):
        u.note("prompt_tokens_details is not an object")
        details = None
    details = details or {}
    cached = u.count(details, "cached_tokens")
    if cached is None:
        cached = u.count(usage, "cache_read_input_tokens")
    write = u.count(usage, "cache_creation_input_tokens")
    if write is None:
        write = u.count(details, "cache_write_tokens")
    if u.prompt_tokens is not None and (cached or 0) + (write or 0) > u.prompt_tokens:
        u.note(f"cached {cached} + written {write} > prompt_tokens {u.prompt_tokens}")
        cached, write = min(cached or 0, u.prompt_tokens), None
    u.cached_tokens, u.cache_write_tokens = cached, write


def ends(data: bytes, obj: Any) -> bool:
    """A stream ends with ``data: [DONE]``."""
    return data == b"[DONE]"
