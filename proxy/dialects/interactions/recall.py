"""``context_recall`` on the Interactions API: not offered (``can_offer`` is always
false), so a lossy rewrite of an interaction leaves its ``orig:`` ids in the text but
adds no tool. The rest of the ``Wire`` is there for the protocol: a reply's calls are
its ``function_call`` steps, a stream is never held."""

from __future__ import annotations

from typing import Any

from context_engine.proxy.dialects.recall_wire import (
    Hold,
    SummedUsage,
    Turn,
    WireBase,
    split_calls,
)


def _turn(steps: Any) -> Turn:
    steps = steps if isinstance(steps, list) else []
    calls, others = split_calls(steps, ("function_call",), "arguments", "id")
    return Turn(steps, calls, others)


class Reader:
    """One streamed reply: never holds it (the tool is never offered)."""

    def __init__(self) -> None:
        self.usage: dict[str, Any] | None = None
        self.hold = Hold()

    def take(self, obj: dict[str, Any]) -> bool:
        interaction = obj.get("interaction")
        if isinstance(interaction, dict) and isinstance(interaction.get("usage"), dict):
            self.usage = interaction["usage"]
        return False

    def hide(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        return obj

    def turn(self) -> Turn:
        return Turn([])


class InteractionsWire(WireBase):

    def __init__(self) -> None:
        super().__init__("interactions", {}, Reader, lambda: SummedUsage("usage"))

    def can_offer(self, data: dict[str, Any]) -> bool:
        return False

    def add_tool(self, raw: bytes) -> bytes:
        return raw

    def turn(self, data: dict[str, Any]) -> Turn:
        return _turn(data.get("steps"))

    def follow_up(self, sent: dict[str, Any], rounds: list[Any], last: bool) -> bytes:
        raise NotImplementedError("context_recall is not offered on the Interactions API")


INTERACTIONS = InteractionsWire()
