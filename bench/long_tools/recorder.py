"""The message log of one scripted session, in Chat Completions form.

A family's script calls ``call``/``parallel`` the way a model emits tool calls; the
recorder runs each call against the family's environment and appends the assistant
message and the ``tool`` results exactly as a client would send them. Tool-call ids are
derived from the session id and a counter, so a rebuild is byte-identical.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from typing import Any, Protocol


class ToolError(Exception):
    """A tool refused the call; its message becomes the tool result."""


class Environment(Protocol):
    def run(self, name: str, args: dict[str, Any]) -> str: ...


@dataclass
class Recorder:
    """Appends the assistant's calls and the environment's answers to ``messages``."""

    session: str
    env: Environment
    rng: random.Random
    messages: list[dict[str, Any]] = field(default_factory=list)
    calls: int = 0

    def start(self, task: str, system: str | None) -> None:
        if system:
            self.messages.append({"role": "system", "content": system})
        self.messages.append({"role": "user", "content": task})

    def call(self, name: str, args: dict[str, Any], text: str | None = None) -> str:
        """One tool call in its own assistant message; returns the tool's text."""
        return self.parallel([(name, args)], text)[0]

    def parallel(self, batch: list[tuple[str, dict[str, Any]]], text: str | None = None) -> list[str]:
        """Several tool calls in one assistant message, answered in order."""
        calls = []
        for name, args in batch:
            self.calls += 1
            digest = hashlib.sha256(f"{self.session}:{self.calls}".encode()).hexdigest()[:24]
            calls.append({"id": f"call_{digest}", "type": "function",
                          "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}})
        self.messages.append({"role": "assistant", "content": text, "tool_calls": calls})
        results = []
        for (name, args), c in zip(batch, calls):
            try:
                out = self.env.run(name, args)
            except ToolError as err:
                out = f"Error: {err}"
            results.append(out)
            self.messages.append({"role": "tool", "tool_call_id": c["id"], "content": out})
        return results

    def fan_out(self, batch: list[tuple[str, dict[str, Any]]], text: str | None = None,
                width: int = 3) -> list[str]:
        """``batch`` in order, grouped at random into messages of 1..``width`` parallel calls."""
        out: list[str] = []
        i = 0
        while i < len(batch):
            n = self.rng.randint(1, width) if self.rng.random() < 0.5 else 1
            out += self.parallel(batch[i:i + n], text if i == 0 else None)
            i += n
        return out

    def maybe(self, share: float, text: str) -> str | None:
        """``text`` with probability ``share``: the short sentence some models write first."""
        return text if self.rng.random() < share else None

    def finish(self, text: str) -> None:
        self.messages.append({"role": "assistant", "content": text})


def dump(obj: Any, pretty: bool) -> str:
    """JSON text as an MCP server returns it: indented or compact, keys in source order."""
    if pretty:
        return json.dumps(obj, indent=2, ensure_ascii=False)
    return json.dumps(obj, ensure_ascii=False)


def add_up(expression: str) -> str:
    """``calculate`` for the sums the scripts send (``a + b + c``), rounded like tau-bench's tool."""
    try:
        return str(round(sum(float(term) for term in expression.split("+")), 2))
    except ValueError as err:
        raise ToolError("invalid expression") from err
