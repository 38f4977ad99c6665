"""Tiny rules for testing the pipeline machinery (not registered in the product)."""

from __future__ import annotations

from dataclasses import dataclass

from context_engine.proxy.engine.context import RequestContext
from context_engine.proxy.engine.contract import RuleDeps
from context_engine.proxy.engine.messages import last_user_index


@dataclass(frozen=True)
class NoConfig:
    pass


class Raises:
    name = "raises"
    Config = NoConfig

    def __init__(self, config: NoConfig | None = None, deps: RuleDeps | None = None) -> None:
        pass

    async def apply(self, ctx: RequestContext) -> RequestContext:
        raise RuntimeError("this rule always fails")


class DropOldAssistant:
    """Drops the text of assistant messages without tool calls before the last user turn
    (each becomes "…": dropping the turn would put two user messages side by side)."""

    name = "drop_old_assistant"
    Config = NoConfig

    def __init__(self, config: NoConfig | None = None, deps: RuleDeps | None = None) -> None:
        pass

    async def apply(self, ctx: RequestContext) -> RequestContext:
        last = last_user_index(ctx.messages)
        kept = [m if i >= last or m.get("role") != "assistant" or m.get("tool_calls")
                or m.get("content") == "…" else {**m, "content": "…"}
                for i, m in enumerate(ctx.messages)]
        return ctx.replace(messages=kept) if kept != ctx.messages else ctx


class BreaksLastUser:
    """Rewrites the last user turn: the invariant check must refuse it."""

    name = "breaks_last_user"
    Config = NoConfig

    def __init__(self, config: NoConfig | None = None, deps: RuleDeps | None = None) -> None:
        pass

    async def apply(self, ctx: RequestContext) -> RequestContext:
        i = last_user_index(ctx.messages)
        msgs = list(ctx.messages)
        msgs[i] = {**msgs[i], "content": "tampered"}
        return ctx.replace(messages=msgs)


@dataclass(frozen=True)
class LoudConfig:
    loud: bool = True


class Capable(DropOldAssistant):
    """``DropOldAssistant`` (with a journal note when it drops) offering every capability
    of the contract under a name the core has never heard of: it fences text, lays out
    closed blocks of one unit, and is lossless with ``loud`` off."""

    name = "capable"
    Config = LoudConfig  # type: ignore[assignment]
    lossless = {"loud": False}

    def __init__(self, config: LoudConfig | None = None, deps: RuleDeps | None = None) -> None:
        self.config = config or LoudConfig()

    def fence(self, session_id: str, text: str) -> str:
        return f"<<{session_id}>>{text}<</{session_id}>>"

    def blocks(self) -> tuple[int, int]:
        return 1, 1

    async def apply(self, ctx: RequestContext) -> RequestContext:
        out = await super().apply(ctx)
        return out if out is ctx else out.with_note(self.name, "dropped")
