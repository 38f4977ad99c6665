"""``bench --api responses|anthropic|gemini``: the cases as another wire format.

Each case's chat messages are written as a Responses, Anthropic Messages or Gemini
``generateContent`` request and read back through that API's dialect, so every system sees the conversation as the
proxy sees it for that API. The project's engine runs the whole path of a request:
wire bytes → adapter → rules → splice into the bytes → adapter again for measuring.
``--opaque`` adds a reasoning item (Responses), a signed thinking block (Anthropic) or a
signed thought part (Gemini) to every assistant turn, and the run counts requests whose opaque items reached the
output byte for byte.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from typing import Any

from context_engine.bench.cases import Case
from context_engine.proxy.dialects.jsonspan import object_spans
from context_engine.proxy.dialects.registry import BY_NAME
from context_engine.proxy.engine.invariants import rewrite_problems
from context_engine.proxy.engine.messages import system_prefix_len
from context_engine.proxy.engine.opaque import OPAQUE, PLACEHOLDER, SRC

APIS = ("chat", "responses", "anthropic", "gemini")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") for p in content or () if isinstance(p, dict) and p != PLACEHOLDER)


def _opaque(api: str, n: int) -> dict[str, Any]:
    if api == "responses":
        return {"type": "reasoning", "id": f"rs_{n}", "summary": [],
                "encrypted_content": f"gAAAAAB{n:06d}+/opaque=="}
    if api == "gemini":
        return {"text": "", "thought": True, "thoughtSignature": f"Cq{n:06d}+/signed=="}
    return {"type": "thinking", "thinking": "", "signature": f"Eq{n:06d}+/signed=="}


def _arguments(call: dict[str, Any]) -> dict[str, Any]:
    try:
        args = json.loads(call["function"].get("arguments") or "{}")
    except ValueError:
        args = {"raw": call["function"].get("arguments")}
    return args if isinstance(args, dict) else {"value": args}


def to_responses(model: str, messages: list[Any], tools: Any, opaque: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model}
    start = 0
    if messages and messages[0].get("role") == "system" and isinstance(messages[0].get("content"), str):
        body["instructions"], start = messages[0]["content"], 1
    items: list[dict[str, Any]] = []
    for n, m in enumerate(messages[start:]):
        role, content = m.get("role"), m.get("content")
        if isinstance(content, list):
            content = [p for p in content if p != PLACEHOLDER]
        if role == "tool":
            items.append({"type": "function_call_output", "call_id": m.get("tool_call_id", ""),
                          "output": _text(content)})
            continue
        if role == "assistant":
            items += m.get(OPAQUE) or ([_opaque("responses", n)] if opaque else [])
        calls = m.get("tool_calls") or [] if role == "assistant" else []
        if content or not calls:
            kind = "output_text" if role == "assistant" else "input_text"
            items.append({"type": "message", "role": role, "content": content if isinstance(content, str)
                          else [{"type": kind, "text": _text([p])} for p in content or ()] or ""})
        items += [{"type": "function_call", "call_id": c.get("id", ""), "name": c["function"]["name"],
                   "arguments": c["function"].get("arguments", "")} for c in calls]
    body["input"] = items
    if tools:
        body["tools"] = [{"type": "function", **t["function"]} if "function" in t else t for t in tools]
    return body


def to_anthropic(model: str, messages: list[Any], tools: Any, opaque: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "max_tokens": 1024}
    start = system_prefix_len(messages)
    if start:
        body["system"] = "\n\n".join(_text(m.get("content")) for m in messages[:start])
    out: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        # consecutive messages of one role stay apart (the API accepts them), but
        # tool results and the user text after them are one message, as clients send them
        if out and out[-1]["role"] == role == "user" and all(
                b["type"] == "tool_result" for b in out[-1]["content"]):
            out[-1]["content"] += blocks
        else:
            out.append({"role": role, "content": blocks})

    for n, m in enumerate(messages[start:]):
        role, text = m.get("role"), _text(m.get("content"))
        if role == "tool":
            add("user", [{"type": "tool_result", "tool_use_id": m.get("tool_call_id", ""), "content": text}])
        elif role == "assistant":
            blocks = list(m.get(OPAQUE) or ([_opaque("anthropic", n)] if opaque else []))
            blocks += [{"type": "text", "text": text}] if text else []
            for c in m.get("tool_calls") or ():
                blocks.append({"type": "tool_use", "id": c.get("id", ""), "name": c["function"]["name"],
                               "input": _arguments(c)})
            add("assistant", blocks or [{"type": "text", "text": "(no text)"}])
        else:
            add("user", [{"type": "text", "text": text or "(empty)"}])
    body["messages"] = out
    if tools:
        body["tools"] = [{"name": t["function"]["name"], "description": t["function"].get("description", ""),
                          "input_schema": t["function"].get("parameters") or {"type": "object"}}
                         if "function" in t else t for t in tools]
    return body


def to_gemini(model: str, messages: list[Any], tools: Any, opaque: bool) -> dict[str, Any]:
    """A ``generateContent`` body (the model goes in the path: ``path_for``). Calls and
    responses carry the chat ids, as Gemini CLI's do."""
    body: dict[str, Any] = {}
    start = system_prefix_len(messages)
    if start:
        body["systemInstruction"] = {"parts": [
            {"text": "\n\n".join(_text(m.get("content")) for m in messages[:start])}]}
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for n, m in enumerate(messages[start:]):
        role, text = m.get("role"), _text(m.get("content"))
        if role == "tool":
            cid = m.get("tool_call_id", "")
            part = {"functionResponse": {"id": cid, "name": names.get(cid, ""), "response": {"output": text}}}
            if out and out[-1]["role"] == "user" and all("functionResponse" in p for p in out[-1]["parts"]):
                out[-1]["parts"].append(part)
            else:
                out.append({"role": "user", "parts": [part]})
        elif role == "assistant":
            parts = list(m.get(OPAQUE) or ([_opaque("gemini", n)] if opaque else []))
            parts += [{"text": text}] if text else []
            for c in m.get("tool_calls") or ():
                names[c.get("id", "")] = c["function"]["name"]
                parts.append({"functionCall": {"id": c.get("id", ""), "name": c["function"]["name"],
                                               "args": _arguments(c)}})
            out.append({"role": "model", "parts": parts or [{"text": "(no text)"}]})
        else:
            out.append({"role": "user", "parts": [{"text": text or "(empty)"}]})
    body["contents"] = out
    if tools:
        body["tools"] = [{"functionDeclarations": [
            {"name": t["function"]["name"], "description": t["function"].get("description", ""),
             "parameters": t["function"].get("parameters") or {"type": "object"}}
            for t in tools if "function" in t]}]
    return body


def path_for(api: str, model: str) -> str:
    """Where the request goes (Gemini names its model there)."""
    return f"/v1beta/models/{model}:generateContent" if api == "gemini" else ""


def to_wire(api: str, model: str, messages: list[Any], tools: Any, opaque: bool = False) -> bytes:
    build = {"responses": to_responses, "anthropic": to_anthropic, "gemini": to_gemini}[api]
    return json.dumps(build(model, messages, tools, opaque), ensure_ascii=False).encode()


def strip(messages: list[Any], keys: tuple[str, ...] = (SRC,)) -> list[Any]:
    """Neutral messages without the adapter's container tags (opaque items stay, by default)."""
    return [{k: v for k, v in m.items() if k not in keys} for m in messages]


def neutral(api: str, raw: bytes, model: str = "") -> tuple[list[Any], Any]:
    parsed = BY_NAME[api].parse(raw, path_for(api, model))
    return strip(parsed.chat["messages"]), parsed.chat.get("tools")


def convert_case(case: Case, api: str, model: str, opaque: bool) -> Case:
    messages, tools = neutral(api, to_wire(api, model, case.messages, case.tools, opaque), model)
    return replace(case, messages=messages, tools=tools, meta={**case.meta, "opaque": opaque})


@dataclass
class OpaqueTally:
    requests: int = 0
    intact: int = 0
    sent: int = 0  # requests measured for byte transparency
    transparent: int = 0  # ... whose fields outside the conversation kept their bytes


def outside_kept(raw: bytes, out: bytes, conversation: tuple[str, ...]) -> bool:
    """Every top-level field of ``out`` but the conversation's has the bytes it has in ``raw``."""
    text, new = raw.decode(), out.decode()
    (_, before), (_, after) = object_spans(text), object_spans(new)
    keep = set(before) - set(conversation)
    return keep == set(after) - set(conversation) and all(
        text[slice(*before[k])] == new[slice(*after[k])] for k in keep)


@dataclass
class _WireSession:
    inner: Any  # context_engine.bench.systems._EngineSession
    api: str
    opaque: bool
    tally: OpaqueTally

    async def rewrite(self, messages: list[Any], tools: Any) -> Any:
        from context_engine.bench.systems import Outcome

        raw = to_wire(self.api, self.inner.model, messages, tools)
        parsed = BY_NAME[self.api].parse(raw, path_for(self.api, self.inner.model))
        start = time.perf_counter()
        rw = await self.inner.engine.rewrite(
            parsed.chat, self.inner.session_id,
            can_offer=self.inner.recall or BY_NAME[self.api].recall.can_offer(parsed.data))
        out_raw = raw
        if rw.result.changed:
            try:
                out_raw = parsed.splice(rw.result.ctx.messages)
            except ValueError:
                pass  # the proxy sends the original here too
        ms = (time.perf_counter() - start) * 1000
        self.inner.engine.prefetch()
        self.tally.sent += 1
        self.tally.transparent += outside_kept(raw, out_raw, BY_NAME[self.api].conversation)
        out, _ = neutral(self.api, out_raw, self.inner.model)
        if self.opaque:
            held = _opaque_texts(raw)
            self.tally.requests += 1
            self.tally.intact += all(t in out_raw for t in held)
        both = (SRC, OPAQUE)  # the engine's own result is checked, as the proxy checks it
        return Outcome(out, ms, journal=list(rw.result.journal),
                       problems=rewrite_problems(strip(parsed.chat["messages"], both),
                                                 strip(rw.result.ctx.messages, both),
                                                 rw.result.ctx.system_line),
                       failed_open=rw.result.failed_open or out_raw == raw and rw.result.changed,
                       reverted_because=list(rw.result.problems), recall=rw.recall)


def _opaque_texts(raw: bytes) -> list[bytes]:
    data = json.loads(raw)
    found = [i for i in data.get("input") or () if isinstance(i, dict) and i.get("type") == "reasoning"]
    for m in data.get("messages") or ():
        found += [b for b in m["content"] if isinstance(b, dict) and b.get("type") == "thinking"] \
            if isinstance(m.get("content"), list) else []
    for c in data.get("contents") or ():
        found += [p for p in c["parts"] if isinstance(p, dict) and p.get("thought")]
    return [json.dumps(o, ensure_ascii=False).encode() for o in found]


@dataclass
class WireSystem:
    inner: Any  # context_engine.bench.systems.EngineSystem
    api: str
    opaque: bool = False
    tally: OpaqueTally = field(default_factory=OpaqueTally)

    @property
    def name(self) -> str:
        return str(self.inner.name)

    @property
    def recall(self) -> bool:
        """bench --recall: the engine offers context_recall on this API's wire too."""
        return bool(self.inner.recall)

    def open(self, session_id: str, model: str | None = None) -> Any:
        return _WireSession(self.inner.open(session_id, model), self.api, self.opaque, self.tally)
