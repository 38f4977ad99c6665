"""The worst inputs of issue 25, as keyless request bodies (the upstream refuses them with 401,
after the proxy has read them and run its rules): what one caller can make the proxy do
for others to wait on.

- ``budget_history``: a chat history of ~30k short turns (~5 MB, far past gpt-4o's window):
  budget's cut over every unit boundary;
- ``many_marks``: Anthropic Messages of 3k turns, every block with ``cache_control``:
  the breakpoint mapping over every mark;
- ``blocks_results``: Anthropic Messages of 400 rounds of 10 ``tool_use`` blocks and their 10
  ``tool_result`` blocks: the merge of blocks × results;
- ``model_100k``: a ``model`` of 100,000 characters on a short agent session;
- ``tool_json``: one tool result that is a JSON array of 40k records (~4 MB): tool_json's
  parse and cut.

``scale`` multiplies every count (the bench's tests use a small one).
"""

from __future__ import annotations

import json
from typing import Any

CHAT, MESSAGES = "/v1/chat/completions", "/v1/messages"
TEXT = "the build failed again on step {i}; rerun it with the verbose flag and read the log"


def _chat(model: str, messages: list[dict[str, Any]]) -> bytes:
    return json.dumps({"model": model, "messages": messages}).encode()


def budget_history(n: int) -> bytes:
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": TEXT.format(i=i)}
             for i in range(n)]
    return _chat("gpt-4o", [{"role": "system", "content": "You are a coding agent."}, *turns,
                            {"role": "user", "content": "what now?"}])


def many_marks(n: int) -> bytes:
    mark = {"type": "ephemeral"}
    turns = [{"role": "user" if i % 2 == 0 else "assistant",
              "content": [{"type": "text", "text": TEXT.format(i=f"{i}.{j}"), "cache_control": mark}
                          for j in range(3)]} for i in range(n)]
    turns.append({"role": "user", "content": "what now?"})
    return json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": turns}).encode()


def blocks_results(rounds: int, per: int = 10) -> bytes:
    turns: list[dict[str, Any]] = [{"role": "user", "content": "fix the tests"}]
    for r in range(rounds):
        ids = [f"toolu_{r}_{j}" for j in range(per)]
        turns.append({"role": "assistant", "content": [
            {"type": "tool_use", "id": k, "name": "read_file", "input": {"path": f"src/m{r}_{j}.py"}}
            for j, k in enumerate(ids)]})
        turns.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": k, "content": (TEXT.format(i=k) + "\n") * 6}
            for k in ids]})
    turns.append({"role": "user", "content": "what now?"})
    return json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": turns}).encode()


def _agent(n: int, result: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "user", "content": "fix the tests"}]
    for i in range(n):
        call = {"id": f"call_{i}", "type": "function",
                "function": {"name": "run", "arguments": json.dumps({"cmd": f"pytest -k t{i}"})}}
        out += [{"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": f"call_{i}", "content": result}]
    return out + [{"role": "user", "content": "what now?"}]


def model_100k(n: int) -> bytes:
    return _chat("m" * 100_000, _agent(n, TEXT.format(i=0)))


def tool_json(records: int) -> bytes:
    rows = [{"id": i, "name": f"item {i}", "status": "ok" if i % 7 else "failed", "size": i * 31,
             "path": f"/srv/data/part-{i % 97}/file-{i}.json"} for i in range(records)]
    return _chat("gpt-4o", _agent(1, json.dumps(rows)))


def hostile_bodies(scale: float = 1.0) -> list[tuple[str, str, bytes]]:
    """(kind, path, body) of each worst input."""
    def k(n: int) -> int:
        return max(2, int(n * scale))
    return [("budget_history", CHAT, budget_history(k(30_000))),
            ("many_marks", MESSAGES, many_marks(k(3_000))),
            ("blocks_results", MESSAGES, blocks_results(k(400))),
            ("model_100k", CHAT, model_100k(k(20))),
            ("tool_json", CHAT, tool_json(k(40_000)))]
