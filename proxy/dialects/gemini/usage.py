"""Usage in Gemini's shape: ``usageMetadata`` (``promptTokenCount``, which counts the
``cachedContent`` tokens too, plus ``toolUsePromptTokenCount``; ``cachedContentTokenCount``
the cache reads; ``candidatesTokenCount`` plus ``thoughtsTokenCount`` the output), the
first candidate's ``finishReason`` and text. A stream (``?alt=sse``) sends whole
responses, each with the usage so far; without ``alt=sse`` it is one JSON array of them.
A stream ends with the chunk that carries a ``finishReason``.
"""

from __future__ import annotations

from typing import Any

from context_engine.proxy.dialects.usage import Usage, as_dict, as_list


def take_usage(u: Usage, obj: Any) -> None:
    if isinstance(obj, list):  # a stream without alt=sse: an array of responses
        for item in obj:
            take_usage(u, item)
        return
    if not isinstance(obj, dict):
        return
    meta = obj.get("usageMetadata")
    if isinstance(meta, dict):
        prompt = u.count(meta, "promptTokenCount")
        tools = u.count(meta, "toolUsePromptTokenCount")
        out, thoughts = u.count(meta, "candidatesTokenCount"), u.count(meta, "thoughtsTokenCount")
        u.prompt_tokens = None if prompt is None else prompt + (tools or 0)
        u.cached_tokens = u.count(meta, "cachedContentTokenCount")
        u.completion_tokens = None if out is None and thoughts is None else (out or 0) + (thoughts or 0)
    elif meta is not None:
        u.note(f"usageMetadata is a {type(meta).__name__}, not an object")
    for n, cand in enumerate(as_list(obj.get("candidates"))):
        if not isinstance(cand, dict) or n:
            continue
        if isinstance(cand.get("finishReason"), str):
            u.finish_reason = cand["finishReason"]
        for part in as_list(as_dict(cand.get("content")).get("parts")):
            if isinstance(part, dict) and not part.get("thought"):
                u.add_text(part.get("text"))


def ends(data: bytes, obj: Any) -> bool:
    return isinstance(obj, dict) and any(
        isinstance(c, dict) and isinstance(c.get("finishReason"), str)
        for c in as_list(obj.get("candidates")))
