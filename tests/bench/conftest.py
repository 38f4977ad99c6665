"""Shared pieces of the bench tests: tiny hand-built cases and test-only rules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from context_engine.proxy.engine.context import RequestContext
from context_engine.proxy.engine.contract import Rule, RuleDeps, option
from context_engine.rules import REGISTRY

SYSTEM = {"role": "system", "content": "You are a helpful agent."}


def tool_call(cid: str, name: str = "lookup", args: str = "{}") -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def agent_messages() -> list[dict[str, Any]]:
    """system, task, two tool rounds, a filler turn marked for dropping, a final question."""
    return [
        SYSTEM,
        {"role": "user", "content": "Find booking ABC123 and tell me the gate."},
        {"role": "assistant", "content": None,
         "tool_calls": [tool_call("c1", args='{"id": "ABC123"}')]},
        {"role": "tool", "tool_call_id": "c1",
         "content": '{"booking": "ABC123", "flight": "LH 400"}'},
        {"role": "assistant", "content": "DROP-ME filler"},
        {"role": "user", "content": "And the gate?"},
        {"role": "assistant", "content": None,
         "tool_calls": [tool_call("c2", args='{"flight": "LH 400"}')]},
        {"role": "tool", "tool_call_id": "c2", "content": '{"gate": "B12"}'},
    ]


@dataclass(frozen=True)
class DropMarkedConfig:
    marker: str = option("DROP-ME", "assistant messages starting with this are dropped")


class DropMarked:
    """Test-only rule: drops assistant text messages that start with the marker."""

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


@dataclass(frozen=True)
class DropFirstToolConfig:
    pass


class DropFirstTool:
    """Test-only rule that breaks a tool pair (the pipeline must fail open)."""

    name = "drop_first_tool"
    Config = DropFirstToolConfig

    def __init__(self, config: DropFirstToolConfig, deps: RuleDeps) -> None:
        pass

    async def apply(self, ctx: RequestContext) -> RequestContext:
        for i, m in enumerate(ctx.messages):
            if m.get("role") == "tool":
                return ctx.replace(messages=ctx.messages[:i] + ctx.messages[i + 1:])
        return ctx


# The product's rules and the test-only ones; passed as ``registry=`` (the global REGISTRY
# is never changed).
TEST_REGISTRY: dict[str, type[Rule]] = {**REGISTRY, DropMarked.name: DropMarked,
                                        DropFirstTool.name: DropFirstTool}
