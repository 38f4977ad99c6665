"""A streamed interaction as the ``context_recall`` loop reads it (``Reader``) and as the
client sees it over several replies (``Continuity``); ``recall`` is the wire around them.

The stream's events: ``interaction.created`` (the interaction's id), ``step.start`` (a
step at an ``index``: a call's ``function_call`` step carries its ``id`` and ``name``
here, so a recall call is known from its first event), ``step.delta`` (text, a thought's
signature, an ``arguments_delta`` of the call's arguments as JSON text), ``step.stop``
(its ``usage`` may ride along), ``interaction.status_update`` and ``interaction.completed``
(the interaction's status, usage and, perhaps, its steps).
"""

from __future__ import annotations

import json
from typing import Any

from context_engine.proxy.dialects.recall_wire import (
    Hold,
    Turn,
    split_calls,
    sum_counts,
    without_tool,
)
from context_engine.proxy.engine.recall_resolve import TOOL_NAME

STARTS = frozenset({"interaction.created"})
RUNNING = frozenset({"in_progress", "queued", "created"})


def is_recall(step: Any) -> bool:
    return isinstance(step, dict) and step.get("type") == "function_call" and step.get("name") == TOOL_NAME


class StepLog:
    """The steps a stream builds, by index (text deltas joined, arguments parsed at the end)."""

    def __init__(self) -> None:
        self.steps: dict[int, dict[str, Any]] = {}
        self.args: dict[int, str] = {}

    def take(self, obj: dict[str, Any]) -> None:
        index, kind = obj.get("index"), obj.get("event_type")
        if not isinstance(index, int):
            return
        if kind == "step.start" and isinstance(obj.get("step"), dict):
            self.steps[index] = dict(obj["step"])
        elif kind == "step.delta" and isinstance(obj.get("delta"), dict):
            self._delta(self.steps.setdefault(index, {}), index, obj["delta"])

    def _delta(self, step: dict[str, Any], index: int, delta: dict[str, Any]) -> None:
        kind = delta.get("type")
        if kind == "text" and isinstance(delta.get("text"), str):
            content = step.setdefault("content", [])
            if content and isinstance(content[-1], dict) and content[-1].get("type") == "text" \
                    and len(content[-1]) == 2:
                content[-1] = {"type": "text", "text": str(content[-1].get("text", "")) + delta["text"]}
            else:
                content.append({"type": "text", "text": delta["text"]})
        elif kind == "thought_signature" and isinstance(delta.get("signature"), str):
            step["signature"] = delta["signature"]
        elif kind == "arguments_delta" and isinstance(delta.get("arguments"), str):
            self.args[index] = self.args.get(index, "") + delta["arguments"]

    def ordered(self) -> list[dict[str, Any]]:
        out = []
        for index in sorted(self.steps):
            step = self.steps[index]
            if index in self.args:
                try:
                    args = json.loads(self.args[index])
                except ValueError:
                    args = None
                step = {**step, "arguments": args if isinstance(args, dict) else {"raw": self.args[index]}}
            out.append(step)
        return out


def turn_of(reply: dict[str, Any]) -> Turn:
    """A reply (``{"id": ..., "steps": [...]}``, as the interaction holds them) as a turn."""
    steps = reply.get("steps")
    steps = steps if isinstance(steps, list) else []
    calls, others = split_calls(steps, ("function_call",), "arguments", "id")
    return Turn(reply, calls, others)


class Reader:
    """One streamed reply: its id, its steps, its calls by index, its usage."""

    def __init__(self) -> None:
        self.id: Any = None
        self.log = StepLog()
        self.final: list[Any] | None = None  # the completed interaction's steps, when it has any
        self.usage: dict[str, Any] | None = None
        self.hold = Hold()

    def take(self, obj: dict[str, Any]) -> bool:
        self.log.take(obj)
        kind = obj.get("event_type")
        interaction = obj.get("interaction")
        if isinstance(interaction, dict):
            self.id = interaction.get("id") or self.id
            if isinstance(interaction.get("usage"), dict):
                self.usage = interaction["usage"]
            if kind == "interaction.completed" and isinstance(interaction.get("steps"), list) \
                    and interaction["steps"]:
                self.final = interaction["steps"]
        elif isinstance(obj.get("usage"), dict):
            self.usage = obj["usage"]
        step = obj.get("step")
        if kind == "step.start" and isinstance(obj.get("index"), int) and isinstance(step, dict) \
                and step.get("type") == "function_call":
            return self.hold.begins(obj["index"], str(step.get("name") or ""))
        return False

    def hide(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        if not self.hold.recall:
            return obj
        index = obj.get("index")
        if isinstance(index, int):
            at = self.hold.index(index)
            if at is None:
                return None
            obj = obj if at == index else {**obj, "index": at}
        settled = not self.hold.client_calls  # no call is left: the interaction is done
        interaction = obj.get("interaction")
        if isinstance(interaction, dict):
            shown = dict(interaction)
            if isinstance(shown.get("steps"), list):
                shown["steps"] = [s for s in shown["steps"] if not is_recall(s)]
            if settled and shown.get("status") == "requires_action":
                shown["status"] = "completed"
            obj = {**obj, "interaction": shown}
        if settled and obj.get("status") == "requires_action":
            obj = {**obj, "status": "completed"}
        return obj

    def turn(self) -> Turn:
        return turn_of({"id": self.id, "steps": self.final or self.log.ordered()})


class Continuity:
    """One client stream over several replies: a follow-up's ``interaction.created`` and
    running status updates are left out, its step indices come after the ones the client
    has, and its events name the first reply's interaction; its ``interaction.completed``
    carries the usage summed over rounds, the client's tools (without ours) and every
    step the client saw. (A follow-up on a stream is never chained: its
    ``previous_interaction_id`` is the client's.)"""

    def __init__(self) -> None:
        self.first_id: Any = None
        self.added = 0  # steps the client was told of
        self.shift = 0  # what the reply being relayed adds to its step indices
        self.seen = StepLog()  # the steps the client got
        self.before: list[Any] = []  # ... from the replies before this one

    def start(self, follow: bool) -> None:
        self.shift, self.before = self.added, self.seen.ordered()

    def event(self, obj: dict[str, Any], follow: bool,
              usages: list[dict[str, Any]]) -> dict[str, Any] | None:
        kind = obj.get("event_type")
        out = obj
        if follow:
            if kind in STARTS or (kind == "interaction.status_update" and obj.get("status") in RUNNING):
                return None
            out = dict(obj)
            if isinstance(obj.get("index"), int):
                out["index"] = obj["index"] + self.shift
            if "interaction_id" in obj and self.first_id is not None:
                out["interaction_id"] = self.first_id
            if isinstance(obj.get("usage"), dict):
                out["usage"] = sum_counts(obj["usage"], usages)
            if isinstance(obj.get("interaction"), dict):
                out["interaction"] = self._final(obj["interaction"], usages)
        elif kind == "interaction.created" and isinstance(obj.get("interaction"), dict):
            self.first_id = obj["interaction"].get("id")
        if kind == "step.start" and isinstance(out.get("index"), int):
            self.added = max(self.added, out["index"] + 1)
        self.seen.take(out)
        return out

    def _final(self, interaction: dict[str, Any], usages: list[dict[str, Any]]) -> dict[str, Any]:
        out = dict(interaction)
        if self.first_id is not None:
            out["id"] = self.first_id
        if isinstance(out.get("tools"), list):
            out["tools"] = without_tool(out["tools"])
        if isinstance(interaction.get("steps"), list) and interaction["steps"]:
            out["steps"] = self.before + interaction["steps"]
        if isinstance(interaction.get("usage"), dict):
            out["usage"] = sum_counts(interaction["usage"], usages)
        return out
