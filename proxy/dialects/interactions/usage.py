"""Usage in the Interactions API's shape: the interaction's ``usage``
(``total_input_tokens`` plus ``total_tool_use_tokens`` the input, ``total_cached_tokens``
the cache reads, ``total_output_tokens`` plus ``total_thought_tokens`` the output), its
``status`` as the finish, its text (the ``model_output`` steps' text contents, or the
``step.delta`` events' text deltas).

A stream (``stream: true``) sends ``interaction.created``, ``step.start`` /
``step.delta`` / ``step.stop`` and ``interaction.status_update`` events and ends with
``interaction.completed``, whose interaction carries the usage (a ``step.stop`` or a
status update may carry it too: the last one read stands). The legacy stream
(``content.delta`` … ``interaction.complete``) is read the same way.
"""

from __future__ import annotations

from typing import Any

from context_engine.proxy.dialects.usage import Usage, as_dict, as_list

ENDS = frozenset({"interaction.completed", "interaction.complete"})
RUNNING = frozenset({"in_progress", "queued", "created"})


def _read(u: Usage, usage: dict[str, Any]) -> None:
    prompt, tools = u.count(usage, "total_input_tokens"), u.count(usage, "total_tool_use_tokens")
    out, thoughts = u.count(usage, "total_output_tokens"), u.count(usage, "total_thought_tokens")
    if prompt is not None or tools is not None:
        u.prompt_tokens = (prompt or 0) + (tools or 0)
    cached = u.count(usage, "total_cached_tokens")
    if cached is not None or prompt is not None:
        u.cached_tokens = cached
    if out is not None or thoughts is not None:
        u.completion_tokens = (out or 0) + (thoughts or 0)


def _interaction(u: Usage, obj: dict[str, Any], whole: bool) -> None:
    usage = obj.get("usage")
    if isinstance(usage, dict):
        _read(u, usage)
    elif usage is not None:
        u.note(f"usage is a {type(usage).__name__}, not an object")
    status = obj.get("status")
    if isinstance(status, str) and status not in RUNNING:
        u.finish_reason = status
    if whole:  # a whole interaction: its text is in its model_output steps (or outputs)
        for step in as_list(obj.get("steps")) + as_list(obj.get("outputs")):
            step = as_dict(step)
            contents = as_list(step.get("content")) if step.get("type") == "model_output" else [step]
            for c in contents:
                if isinstance(c, dict) and c.get("type") == "text":
                    u.add_text(c.get("text"))


def take_usage(u: Usage, obj: Any) -> None:
    if not isinstance(obj, dict):
        return
    kind = obj.get("event_type")
    if not isinstance(kind, str):  # a whole interaction
        _interaction(u, obj, True)
        return
    if kind in ("step.delta", "content.delta"):
        delta = as_dict(obj.get("delta"))
        if delta.get("type") == "text":
            u.add_text(delta.get("text"))
    elif isinstance(obj.get("interaction"), dict):
        _interaction(u, obj["interaction"], False)
    elif isinstance(obj.get("usage"), dict):  # step.stop, interaction.status_update
        _read(u, obj["usage"])
    if kind == "interaction.status_update" and isinstance(obj.get("status"), str) \
            and obj["status"] not in RUNNING:
        u.finish_reason = obj["status"]


def ends(data: bytes, obj: Any) -> bool:
    return isinstance(obj, dict) and obj.get("event_type") in ENDS
