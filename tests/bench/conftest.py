"""Shared pieces of the bench tests: tiny hand-built cases and test-only rules."""

from __future__ import annotations

from typing import Any

from context_engine.proxy.engine.contract import Rule
from context_engine.rules import REGISTRY
from tests.fakes.rules import DropFirstTool, DropMarked

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


# The product's rules and the test-only ones; passed as ``registry=`` (the global REGISTRY
# is never changed).
TEST_REGISTRY: dict[str, type[Rule]] = {**REGISTRY, DropMarked.name: DropMarked,
                                        DropFirstTool.name: DropFirstTool}
