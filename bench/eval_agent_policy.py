"""The built-in model of ``eval agent``: a deterministic policy served as an OpenAI
chat-completions API on loopback, whose every reply depends on what the request holds.

The first user message names the task (``[task <id>]``); the policy knows that task's
plan (``eval_agent_tasks``) the way a trained model knows how such chores go, but it
knows the *values* only from the request: a step whose arguments name a fact
(``{budget}``) is taken only when the fact's regex matches in the text the request shows
for that fact's source (the tool results of the step it comes from, or a
``context_recall`` answer). Otherwise the policy goes back for it:

- a ``context_recall`` call (the proxy's own tool, when the request offers it) naming
  the ``orig:`` id of the cleared result, else a query; the proxy answers it itself;
- else a *re-read*: the source step's tool call again, which the agent runs and pays for.

Progress is read from the agent's own tool calls (their ids, ``s<step>_<n>``), which the
rules keep. Usage is counted from the request (o200k tokens) with OpenAI-style prompt
caching simulated (the longest prefix shared with an earlier request, from 1,024 tokens
in 128-token steps), so the bill sees what a rewrite does to the cache.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from context_engine.bench.eval_agent_tasks import BuiltinTask, Fact
from context_engine.proxy.engine.prefix import strip_marks
from context_engine.proxy.engine.tokens import get_encoding

RECALL = "context_recall"
TASK = re.compile(r"\[task ([\w.-]+)\]")
ORIG = re.compile(r"orig:[0-9a-f]{6,}")
SHORTENED = ("[context-engine:", "orig:")
CALL_ID = re.compile(r"^s(\d+)_\d+$")
DONE = "DONE"


@dataclass
class Seen:
    """What a request shows: each plan step's tool outputs, recall answers, progress."""

    outputs: dict[int, list[str]] = field(default_factory=dict)
    recalled: list[str] = field(default_factory=list)
    done: int = 0  # plan steps taken
    after_recall: bool = False  # the last message answers a context_recall call


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def read_request(messages: Sequence[Any]) -> Seen:
    seen, step_of = Seen(), {}
    for m in messages:
        if not isinstance(m, dict):
            continue
        for call in m.get("tool_calls") or []:
            cid = str(call.get("id", ""))
            match = CALL_ID.match(cid)
            if match:
                step_of[cid] = int(match.group(1))
                seen.done = max(seen.done, int(match.group(1)) + 1)
            elif call.get("function", {}).get("name") == RECALL:
                step_of[cid] = -1
        if m.get("role") == "tool":
            step = step_of.get(str(m.get("tool_call_id")))
            if step == -1:
                seen.recalled.append(_text(m.get("content")))
            elif step is not None:
                seen.outputs.setdefault(step, []).append(_text(m.get("content")))
    last = messages[-1] if messages else {}
    seen.after_recall = isinstance(last, dict) and step_of.get(str(last.get("tool_call_id"))) == -1
    return seen


def extract(fact: Fact, texts: Sequence[str]) -> dict[str, str] | None:
    """The fact's values from the newest text that holds them (None: not visible)."""
    pattern = re.compile(fact.pattern)
    for text in reversed(texts):
        if fact.whole and any(s in text for s in SHORTENED):
            continue  # a shortened output: a maximum over part of it would be a guess
        matches = list(pattern.finditer(text))
        if not matches:
            continue
        if fact.pick.startswith("max:"):
            key = fact.pick[4:]
            return max(matches, key=lambda m: int(m.group(key))).groupdict()
        return matches[-1].groupdict()
    return None


def _call(name: str, args: Mapping[str, str], cid: str) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def decide(task: BuiltinTask, messages: Sequence[Any], tools: Sequence[str]) -> dict[str, Any]:
    """The next assistant message for ``messages`` (a tool call, or the final text)."""
    seen, n = read_request(messages), len(messages)
    if seen.done >= len(task.plan):
        return {"role": "assistant", "content": f"{DONE}: every step of the task is taken."}
    step = task.plan[seen.done]
    needed = set(re.findall(r"\{(\w+)\}", "".join(step.args.values())))
    values: dict[str, str] = {}
    missing: list[Fact] = []
    for fact in task.facts:
        if needed & set(re.compile(fact.pattern).groupindex):
            found = extract(fact, seen.outputs.get(fact.source, []) + seen.recalled)
            values.update(found or {})
            missing += [fact] if found is None else []
    if missing:  # every way back in one reply, as a model calling tools in parallel does
        calls = {json.dumps(c["function"]): c for c in (_go_back(task, f, seen, tools, n, i)
                                                        for i, f in enumerate(missing))}
        return {"role": "assistant", "content": None, "tool_calls": list(calls.values())}
    args = {k: v.format(**values) for k, v in step.args.items()}
    return {"role": "assistant", "content": None, "tool_calls": [_call(step.tool, args, f"s{seen.done}_{n}")]}


def _go_back(task: BuiltinTask, fact: Fact, seen: Seen, tools: Sequence[str], n: int,
             i: int) -> dict[str, Any]:
    """A ``context_recall`` call when offered (and the last message is not already its
    answer), else a re-read: the source step's call again."""
    if RECALL in tools and not seen.after_recall:
        ids = [m.group(0) for text in seen.outputs.get(fact.source, []) for m in ORIG.finditer(text)]
        args = {"id": ids[-1]} if ids else {"query": " ".join(re.compile(fact.pattern).groupindex)}
        return _call(RECALL, args, f"recall_{n}_{i}")
    source = task.plan[fact.source]
    return _call(source.tool, source.args, f"s{fact.source}_{n}{i}")


class PromptCache:
    """OpenAI-style prompt caching of one upstream: the longest token prefix shared with
    one of the last 50 requests, counted from 1,024 tokens in 128-token steps."""

    def __init__(self) -> None:
        self.prompts: list[list[int]] = []

    def usage(self, body: Mapping[str, Any]) -> tuple[int, int]:
        enc = get_encoding("o200k_base")
        tokens: list[int] = []
        for m in [{"tools": body.get("tools") or []}, *(body.get("messages") or [])]:
            tokens += enc.encode_ordinary(json.dumps(strip_marks(m), sort_keys=True, ensure_ascii=False))
        best = 0
        for prev in self.prompts[-50:]:
            same = next((i for i, (a, b) in enumerate(zip(prev, tokens)) if a != b), min(len(prev), len(tokens)))
            best = max(best, same)
        self.prompts.append(tokens)
        return len(tokens), 0 if best < 1024 else best // 128 * 128


def _task_of(tasks: Mapping[str, BuiltinTask], messages: Sequence[Any]) -> BuiltinTask | None:
    for m in messages:
        if isinstance(m, dict) and m.get("role") == "user":
            found = TASK.search(_text(m.get("content")))
            return tasks.get(found.group(1)) if found else None
    return None


def build_policy_app(tasks: Sequence[BuiltinTask]) -> Starlette:
    """The model: ``POST /v1/chat/completions`` (not streamed) answering by ``decide``."""
    by_id, cache = {t.id: t for t in tasks}, PromptCache()

    async def chat(request: Request) -> Response:
        body = json.loads(await request.body())
        messages = body.get("messages") or []
        tools = [str(t.get("function", {}).get("name")) for t in body.get("tools") or []]
        task = _task_of(by_id, messages)
        message = (decide(task, messages, tools) if task else
                   {"role": "assistant", "content": f"{DONE}: no task named in the request."})
        prompt, cached = cache.usage(body)
        completion = 12 + len(json.dumps(message)) // 4
        return JSONResponse({
            "id": f"chatcmpl-policy-{len(messages)}", "object": "chat.completion", "created": 1700000000,
            "model": body.get("model", "policy"), "system_fingerprint": "fp_policy",
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion,
                      "prompt_tokens_details": {"cached_tokens": cached}}})

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
