"""The loopback mock's Responses API and Anthropic Messages, as the real ones answer.

Each builds one reply — a tool call, or text — and serves it as a JSON body or as the
real event stream (Responses: ``response.created`` … ``response.completed``; Messages:
``message_start`` … ``message_stop``). A reasoning model gets a reasoning item with
``encrypted_content`` (Responses), a request with ``thinking`` a signed thinking block
(Messages), so clients send opaque items back as real agents do.

``Reply`` is what to answer: the mock's script (real-agent tests) or its default (a
call of the first offered tool when the last turn is the user's, else text).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from context_engine.proxy.engine.messages import text_of

SHELL_TOOLS = {"bash", "shell", "shell_command", "exec_command", "local_shell", "run_shell_command"}
# The agents' own compaction prompts: such a request gets a summary, not the script's next step
COMPACTION_PROMPTS = ("create a detailed summary of the conversation",  # Claude Code
                      "CONTEXT CHECKPOINT COMPACTION")  # Codex CLI
SUMMARY = "<analysis>Mock analysis.</analysis>\n<summary>Mock summary: the task is under way.</summary>"


@dataclass
class Reply:
    text: str = ""
    tool: str = ""  # tool name when the reply is a call
    arguments: Any = None  # the call's input (a JSON-able value)
    call_id: str = ""


def _sig(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:24]


def sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _shell_args(tool: dict[str, Any], command: str) -> Any:
    """Arguments for a shell tool, shaped by its schema (Codex: an argv array or a string)."""
    schema = tool.get("parameters") or tool.get("input_schema") or {}
    props = schema.get("properties") or {}
    key = next((k for k in ("command", "cmd") if k in props), "command")
    value: Any = ["bash", "-lc", command] if (props.get(key) or {}).get("type") == "array" else command
    return {key: value}


def next_reply(state: Any, api: str, tools: list[Any], neutral: list[Any]) -> Reply:
    named = [t for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)]
    shell = next((t for t in named if t["name"].lower() in SHELL_TOOLS), None)
    n = len(neutral)
    last = neutral[-1] if neutral else {}
    # the last user turn (Claude Code may put a system turn after its summary request)
    asked: dict[str, Any] = next((m for m in reversed(neutral) if m.get("role") == "user"), {})
    if any(p in text_of(asked) for p in COMPACTION_PROMPTS):
        return Reply(text=SUMMARY)
    if state.script and shell is not None:
        step = state.script[state.script_pos] if state.script_pos < len(state.script) else {"text": "Done."}
        state.script_pos += 1
        if "shell" in step:
            return Reply(tool=shell["name"], arguments=_shell_args(shell, step["shell"]),
                         call_id=f"{'toolu' if api == 'anthropic' else 'call'}_{state.script_pos:02d}")
        return Reply(text=step["text"])
    if named and last.get("role") == "user" and not state.script:
        return Reply(tool=named[0]["name"], arguments={"query": text_of(last)[:40]},
                     call_id=f"{'toolu' if api == 'anthropic' else 'call'}_{n}")
    return Reply(text=f"Mock reply to {n} messages.")


def too_long(api: str, prompt: int, limit: int) -> dict[str, Any]:
    """The 400 body a provider sends for a prompt over the model's window."""
    if api == "anthropic":
        return {"type": "error", "error": {"type": "invalid_request_error",
                                           "message": f"prompt is too long: {prompt} tokens > {limit} maximum"}}
    return {"error": {"message": "Your input exceeds the context window of this model. Please adjust "
                                 "your input and try again.", "type": "invalid_request_error",
                      "param": "input", "code": "context_length_exceeded"}}


def bad_breakpoints(body: dict[str, Any]) -> dict[str, Any] | None:
    """The 400 body Anthropic sends for more than 4 ``cache_control`` blocks, or for a
    1-hour one after a 5-minute one (tools, then system, then messages); None if valid."""
    ttls: list[str] = []

    def walk(blocks: Any) -> None:
        for b in blocks if isinstance(blocks, list) else []:
            if isinstance(b, dict):
                if isinstance(b.get("cache_control"), dict):
                    ttls.append(str(b["cache_control"].get("ttl", "5m")))
                walk(b.get("content"))

    walk(body.get("tools"))
    walk(body.get("system"))
    for m in body.get("messages") or []:
        walk(m.get("content") if isinstance(m, dict) else None)
    message = None
    if len(ttls) > 4:
        message = f"A maximum of 4 blocks with cache_control may be provided. Found {len(ttls)}."
    elif any(t == "1h" and "5m" in ttls[:i] for i, t in enumerate(ttls)):
        message = "a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block"
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message}} if message else None


# --- Responses ----------------------------------------------------------------------


def responses_items(body: dict[str, Any], reply: Reply) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    model = str(body.get("model", ""))
    if body.get("reasoning") or model.startswith(("o1", "o3", "o4", "gpt-5")):
        item: dict[str, Any] = {"id": "rs_" + _sig("rs", reply), "type": "reasoning", "summary": []}
        if "reasoning.encrypted_content" in (body.get("include") or ()):
            item["encrypted_content"] = "gAAAAAB" + _sig("enc", reply) * 4 + "=="
        items.append(item)
    if reply.tool:
        items.append({"id": "fc_" + _sig("fc", reply), "type": "function_call", "status": "completed",
                      "arguments": json.dumps(reply.arguments), "call_id": reply.call_id,
                      "name": reply.tool})
    else:
        items.append({"id": "msg_" + _sig("msg", reply), "type": "message", "status": "completed",
                      "content": [{"type": "output_text", "annotations": [], "logprobs": [],
                                   "text": reply.text}], "role": "assistant"})
    return items


def response_object(body: dict[str, Any], output: list[dict[str, Any]], usage: dict[str, Any] | None,
                    status: str = "completed") -> dict[str, Any]:
    return {"id": "resp_mock", "object": "response", "created_at": 1700000000, "status": status,
            "background": False, "error": None, "incomplete_details": None,
            "instructions": body.get("instructions"), "max_output_tokens": body.get("max_output_tokens"),
            "model": body.get("model", "mock"), "output": output, "parallel_tool_calls": True,
            "previous_response_id": body.get("previous_response_id"),
            "reasoning": {"effort": None, "summary": None}, "store": body.get("store", True),
            "temperature": 1.0, "text": {"format": {"type": "text"}, "verbosity": "medium"},
            "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools") or [],
            "top_p": 1.0, "truncation": "disabled", "usage": usage, "user": None, "metadata": {},
            "x_mock_extra": {"kept": True}}


def responses_usage(prompt: int, cached: int) -> dict[str, Any]:
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": 9, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + 9}


async def responses_stream(body: dict[str, Any], reply: Reply, usage: dict[str, Any]) -> AsyncIterator[bytes]:
    seq = iter(range(10_000))

    def ev(kind: str, **data: Any) -> bytes:
        return sse(kind, {"type": kind, "sequence_number": next(seq), **data})

    yield ev("response.created", response=response_object(body, [], None, "in_progress"))
    yield ev("response.in_progress", response=response_object(body, [], None, "in_progress"))
    items = responses_items(body, reply)
    for n, item in enumerate(items):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            yield ev("response.output_item.added", output_index=n,
                     item={**item, "status": "in_progress", "content": []})
            part = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
            yield ev("response.content_part.added", item_id=item["id"], output_index=n,
                     content_index=0, part=part)
            for word in text.split(" "):
                yield ev("response.output_text.delta", item_id=item["id"], output_index=n,
                         content_index=0, delta=word + " " if word != text.split(" ")[-1] else word,
                         logprobs=[])
                await asyncio.sleep(0)
            yield ev("response.output_text.done", item_id=item["id"], output_index=n,
                     content_index=0, text=text, logprobs=[])
            yield ev("response.content_part.done", item_id=item["id"], output_index=n,
                     content_index=0, part={**part, "text": text})
        elif item["type"] == "function_call":
            yield ev("response.output_item.added", output_index=n,
                     item={**item, "status": "in_progress", "arguments": ""})
            args = item["arguments"]
            for i in range(0, len(args), 7):
                yield ev("response.function_call_arguments.delta", item_id=item["id"],
                         output_index=n, delta=args[i:i + 7])
            yield ev("response.function_call_arguments.done", item_id=item["id"],
                     output_index=n, arguments=args)
        else:
            yield ev("response.output_item.added", output_index=n,
                     item={k: v for k, v in item.items() if k != "encrypted_content"})
        yield ev("response.output_item.done", output_index=n, item=item)
    yield ev("response.completed", response=response_object(body, items, usage))


# --- Anthropic Messages ---------------------------------------------------------------


def anthropic_blocks(body: dict[str, Any], reply: Reply) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if isinstance(body.get("thinking"), dict) and body["thinking"].get("type") in ("enabled", "adaptive"):
        blocks.append({"type": "thinking", "thinking": "Let me think about it.",
                       "signature": "Eq" + _sig("sig", reply) * 3})
    if reply.tool:
        blocks.append({"type": "tool_use", "id": reply.call_id, "name": reply.tool,
                       "input": reply.arguments})
    else:
        blocks.append({"type": "text", "text": reply.text})
    return blocks


def anthropic_usage(prompt: int, cached: int, cache_control: bool,
                    compact: bool = False) -> dict[str, Any]:
    """Usage as Anthropic reports it. ``compact`` (server-side compaction asked for): a
    summarising step reads the whole prompt first, then the reply reads the summary;
    the top level shows the last step only and ``iterations`` lists both."""
    write = prompt - cached if cache_control else 0
    usage = {"input_tokens": prompt - cached - write, "cache_creation_input_tokens": write,
             "cache_read_input_tokens": cached, "output_tokens": 9, "service_tier": "standard"}
    if compact:
        reply = {"input_tokens": 50, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                 "output_tokens": 9}
        summary = {**{k: usage[k] for k in reply}, "output_tokens": 300}
        usage = {**usage, **reply, "iterations": [{"type": "compaction", **summary},
                                                  {"type": "message", **reply}]}
    return usage


def _final_usage(usage: dict[str, Any]) -> dict[str, Any]:
    """A stream's last usage: the output count, or every count when there are iterations."""
    if "iterations" in usage:
        return {k: v for k, v in usage.items() if k != "service_tier"}
    return {"output_tokens": usage["output_tokens"]}


def asks_compaction(body: dict[str, Any]) -> bool:
    edits = body.get("context_management")
    edits = edits.get("edits") if isinstance(edits, dict) else None
    return any(isinstance(e, dict) and str(e.get("type", "")).startswith("compact")
               for e in edits or ())


def anthropic_message(body: dict[str, Any], reply: Reply, usage: dict[str, Any]) -> dict[str, Any]:
    # a fresh id per reply, as Anthropic's: Claude Code joins the blocks of replies that share one
    msg_id = "msg_" + _sig("msg", reply, len(body.get("messages") or ()))
    return {"id": msg_id, "type": "message", "role": "assistant",
            "model": body.get("model", "mock"), "content": anthropic_blocks(body, reply),
            "stop_reason": "tool_use" if reply.tool else "end_turn", "stop_sequence": None,
            "usage": usage, "x_mock_extra": {"kept": True}}


async def anthropic_stream(body: dict[str, Any], reply: Reply, usage: dict[str, Any]) -> AsyncIterator[bytes]:
    start = anthropic_message(body, reply, {**usage, "output_tokens": 1})
    yield sse("message_start", {"type": "message_start",
                                "message": {**start, "content": [], "stop_reason": None}})
    for n, block in enumerate(anthropic_blocks(body, reply)):
        if block["type"] == "thinking":
            yield sse("content_block_start", {"type": "content_block_start", "index": n,
                                              "content_block": {"type": "thinking", "thinking": ""}})
            deltas = [{"type": "thinking_delta", "thinking": block["thinking"]},
                      {"type": "signature_delta", "signature": block["signature"]}]
        elif block["type"] == "tool_use":
            yield sse("content_block_start", {"type": "content_block_start", "index": n,
                                              "content_block": {**block, "input": {}}})
            args = json.dumps(block["input"])
            deltas = [{"type": "input_json_delta", "partial_json": args[i:i + 7]}
                      for i in range(0, len(args), 7)]
        else:
            yield sse("content_block_start", {"type": "content_block_start", "index": n,
                                              "content_block": {"type": "text", "text": ""}})
            yield sse("ping", {"type": "ping"})
            words = block["text"].split(" ")
            deltas = [{"type": "text_delta", "text": w + (" " if i < len(words) - 1 else "")}
                      for i, w in enumerate(words)]
        for d in deltas:
            yield sse("content_block_delta", {"type": "content_block_delta", "index": n, "delta": d})
            await asyncio.sleep(0)
        yield sse("content_block_stop", {"type": "content_block_stop", "index": n})
    yield sse("message_delta", {"type": "message_delta",
                                "delta": {"stop_reason": "tool_use" if reply.tool else "end_turn",
                                          "stop_sequence": None},
                                "usage": _final_usage(usage)})
    yield sse("message_stop", {"type": "message_stop"})
