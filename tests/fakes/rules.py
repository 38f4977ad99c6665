"""Rules for testing the machinery around rules (never registered in the product).

Each is a real rule (``name``, ``Config``, ``apply``); tests pass instances with
``rules=`` or classes with ``registry=`` (``REGISTRY`` itself is never changed).

- ``Raises``: always fails (the rule guard);
- ``DropOldAssistant``: shortens old assistant turns; ``DropFirstAssistant``: drops the
  first tool-calling turn with its result (an opaque Responses item);
- ``BreaksLastUser``, ``DropFirstTool``: break an invariant (the pipeline fails open);
- ``Capable``: offers every capability of the contract under a name nobody knows;
- ``FoldEveryThird``, ``FoldEveryThirdKeepingRoles``: break the sent prefix every third turn;
- ``Noop``: a copy of the messages (a change of object, not of content);
- ``DropMarked``: drops assistant turns starting with its ``marker`` option (the bench);
- ``Counting``, ``Slow``: count the requests they see; hold their thread.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from context_engine.proxy.engine.context import RequestContext
from context_engine.proxy.engine.contract import RuleDeps, option
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
    closed blocks of one unit, has embedded 3 texts, and is lossless with ``loud`` off."""

    name = "capable"
    Config = LoudConfig  # type: ignore[assignment]
    lossless = {"loud": False}

    def __init__(self, config: LoudConfig | None = None, deps: RuleDeps | None = None) -> None:
        self.config = config or LoudConfig()

    def fence(self, session_id: str, text: str) -> str:
        return f"<<{session_id}>>{text}<</{session_id}>>"

    def blocks(self) -> tuple[int, int]:
        return 1, 1

    def embedded(self) -> int:
        return 3

    async def apply(self, ctx: RequestContext) -> RequestContext:
        out = await super().apply(ctx)
        return out if out is ctx else out.with_note(self.name, "dropped")


class DropFirstAssistant(DropOldAssistant):
    """Drops the first assistant turn with tool calls and the message after it."""

    name = "drop_first_assistant"

    async def apply(self, ctx: RequestContext) -> RequestContext:
        i = next(n for n, m in enumerate(ctx.messages) if m.get("tool_calls"))
        return ctx.replace(messages=ctx.messages[:i] + ctx.messages[i + 2:])


class DropFirstTool:
    """Drops the first tool result, breaking its tool pair."""

    name = "drop_first_tool"
    Config = NoConfig

    def __init__(self, config: NoConfig | None = None, deps: RuleDeps | None = None) -> None:
        pass

    async def apply(self, ctx: RequestContext) -> RequestContext:
        for i, m in enumerate(ctx.messages):
            if m.get("role") == "tool":
                return ctx.replace(messages=ctx.messages[:i] + ctx.messages[i + 1:])
        return ctx


class FoldEveryThird:
    """Replaces all but the last few messages after the system prompt and the task (pinned)
    by one summary that changes every third turn (a block boundary): the sent prefix
    breaks there."""

    name = "fold_every_third"
    Config = NoConfig

    def __init__(self, config: NoConfig | None = None, deps: RuleDeps | None = None) -> None:
        pass

    async def apply(self, ctx: RequestContext) -> RequestContext:
        m = ctx.messages
        cut = (max(0, len(m) - 7) // 6) * 6
        if cut == 0:
            return ctx
        summary = {"role": "assistant", "content": f"[summary of {cut} messages]"}
        return ctx.replace(messages=[m[0], m[1], summary] + list(m[3 + cut:]))


class FoldEveryThirdKeepingRoles(FoldEveryThird):
    """The messages between the first user turn and the last 4 or more become one
    assistant summary that changes every third turn (roles keep alternating, as every
    wire format needs)."""

    async def apply(self, ctx: RequestContext) -> RequestContext:
        m = ctx.messages
        if len(m) < 13:
            return ctx
        cut = (len(m) - 7) // 6 * 6
        summary = {"role": "assistant", "content": f"[summary of {cut + 1} messages]"}
        return ctx.replace(messages=[m[0], m[1], summary] + list(m[3 + cut:]))


class Noop:
    name = "noop"
    Config = NoConfig

    def __init__(self, config: NoConfig | None = None, deps: RuleDeps | None = None) -> None:
        pass

    async def apply(self, ctx: RequestContext) -> RequestContext:
        return ctx.replace(messages=list(ctx.messages))


@dataclass(frozen=True)
class DropMarkedConfig:
    marker: str = option("DROP-ME", "assistant messages starting with this are dropped")


class DropMarked:
    """Drops assistant text messages that start with the marker."""

    name = "drop_marked"
    Config = DropMarkedConfig

    def __init__(self, config: DropMarkedConfig, deps: RuleDeps) -> None:
        self.config = config

    async def apply(self, ctx: RequestContext) -> RequestContext:
        kept = [m for m in ctx.messages if not (
            m.get("role") == "assistant" and isinstance(m.get("content"), str)
            and str(m["content"]).startswith(self.config.marker))]
        if len(kept) == len(ctx.messages):
            return ctx
        return ctx.with_note(self.name, {"dropped": len(ctx.messages) - len(kept)}).replace(
            messages=kept)


class Counting:
    """Counts the requests it saw."""

    name = "counting"
    Config = NoConfig

    def __init__(self, config: NoConfig | None = None, deps: RuleDeps | None = None) -> None:
        self.seen = 0

    async def apply(self, ctx: RequestContext) -> RequestContext:
        self.seen += 1
        return ctx


class Slow:
    """Takes ``seconds`` of its thread per request (so shadow rewrites pile up)."""

    name = "slow"
    Config = NoConfig

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    async def apply(self, ctx: RequestContext) -> RequestContext:
        time.sleep(self.seconds)  # noqa: ASYNC251 (a rule that holds its thread)
        return ctx
