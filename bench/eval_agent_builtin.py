"""The built-in agent of ``eval agent``: a tool loop over the openai SDK that runs its
tools itself, in the task's own folder.

Tools: ``list_dir``, ``read_file``, ``grep``, ``write_file``, ``edit_file`` (paths stay
inside the folder; a bad call answers an error line, as a real harness would). The loop
sends the conversation, runs the reply's tool calls and appends their results, until the
model answers in text (its own stop) or a stop rule ends it: ``max_turns`` requests,
``max_cost`` (the usage the replies report, at the model's list price) or a request
error. Whether the task is solved is then read from the folder (``BuiltinTask.solved``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from context_engine.bench.eval_agent_tasks import BuiltinTask
from context_engine.proxy.billing.pricing import price_for

SYSTEM = ("You are a careful repository agent. Use the tools to read what you need, make the "
          "change, and answer DONE when the task is finished.")


def _tool(name: str, doc: str, **params: str) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": doc,
        "parameters": {"type": "object", "required": list(params),
                       "properties": {k: {"type": "string", "description": v} for k, v in params.items()}}}}


TOOLS = [
    _tool("list_dir", "List the files below a folder.", path="folder, relative to the task root"),
    _tool("read_file", "Read a text file.", path="file, relative to the task root"),
    _tool("grep", "Lines matching a regular expression, as path:line: text.",
          pattern="regular expression", path="file or folder"),
    _tool("write_file", "Write a file (created or replaced).", path="file", content="its whole text"),
    _tool("edit_file", "Replace one exact occurrence of old by new in a file.",
          path="file", old="exact text now in the file", new="replacement"),
]


@dataclass(frozen=True)
class Limits:
    max_turns: int = 30  # requests the agent may send for one task
    max_cost: float = 0.0  # dollars one task may spend (0: no limit)
    request_timeout: float = 60.0  # seconds per request


@dataclass(frozen=True)
class AgentRun:
    solved: bool
    stop: str  # done | max_turns | max_cost | error
    turns: int
    error: str = ""


class Workspace:
    """The tools, confined to ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def _path(self, rel: str) -> Path:
        path = (self.root / rel).resolve()
        if path != self.root and self.root not in path.parents:
            raise ValueError(f"{rel}: outside the task folder")
        return path

    def run(self, name: str, raw_args: str) -> str:
        try:
            args = json.loads(raw_args or "{}")
            if not isinstance(args, dict):
                raise ValueError("arguments must be an object")
            return str(getattr(self, "tool_" + name)(**args)) if name in NAMES else f"error: no tool {name}"
        except (OSError, ValueError, TypeError, re.error) as exc:
            return f"error: {exc}"

    def tool_list_dir(self, path: str) -> str:
        base = self._path(path)
        return "\n".join(sorted(str(p.relative_to(self.root)) for p in base.rglob("*") if p.is_file()))

    def tool_read_file(self, path: str) -> str:
        return self._path(path).read_text(encoding="utf-8")

    def tool_grep(self, pattern: str, path: str) -> str:
        rx, base = re.compile(pattern), self._path(path)
        files = sorted(p for p in ([base] if base.is_file() else base.rglob("*")) if p.is_file())
        hits = [f"{p.relative_to(self.root)}:{i}: {line}" for p in files
                for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if rx.search(line)]
        return "\n".join(hits) or "(no match)"

    def tool_write_file(self, path: str, content: str) -> str:
        target = self._path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
        return f"wrote {len(content)} characters to {path}"

    def tool_edit_file(self, path: str, old: str, new: str) -> str:
        target = self._path(path)
        text = target.read_text(encoding="utf-8")
        if text.count(old) != 1:
            return f"error: old text found {text.count(old)} times in {path}, expected once"
        target.write_text(text.replace(old, new), encoding="utf-8")
        return f"edited {path}"


NAMES = frozenset(t["function"]["name"] for t in TOOLS)


def _cost(model: str, usage: Any) -> float:
    price = price_for(model)
    if price is None or usage is None:
        return 0.0
    cached = int(getattr(getattr(usage, "prompt_tokens_details", None), "cached_tokens", 0) or 0)
    prompt, completion = int(usage.prompt_tokens or 0), int(usage.completion_tokens or 0)
    return float((prompt - cached) * price.input + cached * price.cached_input + completion * price.output)


def run_agent(task: BuiltinTask, folder: Path, base_url: str, model: str, limits: Limits,
              seed: int = 0, api_key: str = "sk-eval-agent-builtin") -> AgentRun:
    """Set the task up in ``folder`` and run the loop against ``base_url`` (``api_key``:
    a real model's key; the built-in model takes any)."""
    from openai import OpenAI, OpenAIError

    task.setup(folder)
    tools = Workspace(folder)
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0,
                    timeout=limits.request_timeout)
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                      {"role": "user", "content": f"[task {task.id}] {task.prompt}"}]
    spent, turns, stop, error = 0.0, 0, "max_turns", ""
    try:
        while turns < limits.max_turns:
            if limits.max_cost and spent >= limits.max_cost:
                stop = "max_cost"
                break
            turns += 1
            reply = client.chat.completions.create(model=model, messages=messages,  # type: ignore[arg-type]
                                                   tools=TOOLS, seed=seed, temperature=0)  # type: ignore[arg-type]
            spent += _cost(model, reply.usage)
            message = reply.choices[0].message
            messages.append(message.model_dump(exclude_none=True, exclude={"refusal", "annotations", "audio"}))
            if not message.tool_calls:
                stop = "done"
                break
            for call in message.tool_calls:
                fn = getattr(call, "function", None)
                output = tools.run(fn.name, fn.arguments) if fn else "error: not a function call"
                messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
    except OpenAIError as exc:
        stop, error = "error", f"{type(exc).__name__}: {exc}"[:300]
    finally:
        client.close()
    return AgentRun(task.solved(folder), stop, turns, error)
