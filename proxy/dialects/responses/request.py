"""OpenAI Responses API (``POST /v1/responses``) ⇄ the neutral form.

``instructions`` becomes a leading system message. ``input`` (a string, or a list of
items) becomes containers: each user/system/developer ``message`` item and each tool
output item stands alone; a run of consecutive assistant-side items (assistant
messages, ``function_call``/``custom_tool_call``, ``reasoning`` and every other item
type) becomes one assistant message with ``tool_calls``. Reasoning, compaction, item
references and unknown items are opaque: they go back as their exact text.

With ``previous_response_id`` or ``conversation`` the server holds the history: only
``input`` is rewritten (``instructions`` is left out of the neutral form).
"""

from __future__ import annotations

from typing import Any

from context_engine.proxy.dialects.base import (
    HEAD,
    Container,
    Group,
    Parsed,
    Unit,
    dumps,
    groups,
    join_pieces,
    neutral_body,
    plain_text,
    rebuild_units,
)
from context_engine.proxy.dialects.jsonspan import array_spans, decode_request, replace_spans
from context_engine.proxy.dialects.memo import TranslationMemo
from context_engine.proxy.dialects.responses.counting import (
    CALLS,
    item_kind,
    kind_of,
    message_count,
)
from context_engine.proxy.engine.opaque import OPAQUE, PLACEHOLDER, SRC
from context_engine.proxy.errors import BadRequest

INSTRUCTIONS = -1
MEMO = TranslationMemo()


def _check(data: dict[str, Any]) -> None:
    if "model" in data and not isinstance(data["model"], str):
        raise BadRequest("'model' must be a string.", param="model")
    if "instructions" in data and not isinstance(data["instructions"], (str, type(None))):
        raise BadRequest("'instructions' must be a string.", param="instructions")
    items = data.get("input")
    if items is None or isinstance(items, str):
        return
    if not isinstance(items, list):
        raise BadRequest("'input' must be a string or an array of items.", param="input")


def _content(item: dict[str, Any]) -> Any:
    return plain_text(item.get("content"), ("input_text", "output_text"))


def _run_content(texts: list[dict[str, Any]], has_calls: bool) -> Any:
    if len(texts) == 1:
        return _content(texts[0])
    if texts:
        parts: list[Any] = []
        for t in texts:
            c = _content(t)
            parts.extend([{"type": "output_text", "text": c}] if isinstance(c, str) else c)
        return parts
    return None if has_calls else [PLACEHOLDER]


def _neutral_call(item: dict[str, Any]) -> dict[str, Any]:
    return {"id": item["call_id"], "type": "function",
            "function": {"name": item.get("name", ""), "arguments": item.get(CALLS[item["type"]], "")}}


def _unit(item: dict[str, Any], raw: str) -> Unit:
    kind = kind_of(item)
    return Unit("content" if kind == "message" else kind, item,
                item["call_id"] if kind in ("call", "result") else "", raw)


def _wire_parts(content: Any, role: str) -> Any:
    if isinstance(content, str):
        return content
    kind = "output_text" if role == "assistant" else "input_text"
    return [{**p, "type": kind} if isinstance(p, dict) and p.get("type") == "text" else p
            for p in content if p != PLACEHOLDER]


def _message_item(base: dict[str, Any] | None, m: dict[str, Any]) -> str:
    role = str(m.get("role"))
    content = m.get("content")
    if not isinstance(content, (str, list)) or not content:
        return ""
    if base is not None and isinstance(content, str) and not isinstance(base.get("content"), str):
        content = [{"type": "text", "text": content}]
    item = {**(base or {"type": "message", "role": role}), "content": _wire_parts(content, role)}
    return dumps(item)


def _patch_call(u: Unit, call: dict[str, Any]) -> str:
    fn = call.get("function") or {}
    return dumps({**u.obj, "name": fn.get("name", ""), CALLS[u.obj["type"]]: fn.get("arguments", "")})


def _patch_result(u: Unit, m: dict[str, Any]) -> str:
    return dumps({**u.obj, "output": _wire_parts(m.get("content") or "", "user")})


def _new_call(call: dict[str, Any]) -> str:
    fn = call.get("function") or {}
    return dumps({"type": "function_call", "call_id": call.get("id", ""),
                  "name": fn.get("name", ""), "arguments": fn.get("arguments", "")})


def _new_items(m: dict[str, Any]) -> list[str]:
    """Items for a message a rule made (it has no container)."""
    if m.get("role") == "tool":
        return [dumps({"type": "function_call_output", "call_id": m.get("tool_call_id", ""),
                       "output": _wire_parts(m.get("content") or "", "user")})]
    out = [_message_item(None, m)]
    out.extend(_new_call(c) for c in m.get("tool_calls") or ())
    return [i for i in out if i]


class ResponsesRequest:
    def __init__(self, raw: bytes, max_items: int = 0) -> None:
        self.text, self.data, self.spans, self.rewritable = decode_request(raw, BadRequest)
        _check(self.data)
        self.containers: list[Container] = []  # built by _fill_raw
        self.where: list[tuple[int, int]] = []  # each container's first item and item count
        self.messages: list[dict[str, Any]] = []
        self.server_state = next((k for k in ("previous_response_id", "conversation")
                                  if self.data.get(k)), "")
        self.over = max_items > 0 and message_count(self.data, self.server_state) > max_items
        instructions = self.data.get("instructions")
        if isinstance(instructions, str) and not self.server_state:
            self.messages.append({"role": "system", "content": instructions, SRC: INSTRUCTIONS})
        items = self.data.get("input")
        if isinstance(items, str):
            self.messages.append({"role": "user", "content": items, SRC: 0})
        elif isinstance(items, list):
            self._read_list(items)

    def _read_list(self, items: list[Any]) -> None:
        """The items, with the translation of those this conversation sent before (all
        but its last container, which new items may extend) taken from the memo."""
        own, span = len(self.messages), self.spans["input"]
        if self.over:  # over the cap: the first items only (its first user and instruction
            # messages, for the session id), nothing kept
            self._read_items(items[:HEAD])
            return
        kept = MEMO.find(self.text, span[0]) if self.rewritable else None
        if kept is not None:
            self.where.extend(kept[0])
            self.messages.extend(kept[1])
        self._read_items(items, kept[2] if kept else 0)
        if self.rewritable and self.where:
            last, cut = len(self.where) - 1, len(self.messages)
            while cut > own and self.messages[cut - 1][SRC] == last:
                cut -= 1
            state = (tuple(self.where[:last]), tuple(self.messages[own:cut]), self.where[last][0])
            MEMO.keep(self.text, span, items[-1], state)

    def _read_items(self, items: list[Any], first: int = 0) -> None:
        run: list[tuple[dict[str, Any], str]] = []  # the current run of assistant-side items
        for n in range(first, len(items)):
            item = items[n]
            kind = item_kind(n, item)
            if kind in ("content", "call", "opaque"):
                if kind == "content" and any(k != "opaque" for _, k in run):
                    # a second assistant message, or one after a call, starts a new turn,
                    # which takes the opaque items (its reasoning) just before it
                    k = len(run)
                    while run[k - 1][1] == "opaque":
                        k -= 1
                    self._run(run[:k], n - len(run))
                    run = run[k:]
                run.append((item, kind))
                continue
            if run:
                self._run(run, n - len(run))
                run = []
            if kind == "message":
                m = {"role": item["role"], "content": _content(item), SRC: len(self.where)}
            else:
                output = item.get("output")
                m = {"role": "tool", "tool_call_id": item["call_id"],
                     "content": output if isinstance(output, (str, list)) else "", SRC: len(self.where)}
            self.where.append((n, 1))
            self.messages.append(m)
        if run:
            self._run(run, len(items) - len(run))

    def _run(self, run: list[tuple[dict[str, Any], str]], first: int) -> None:
        texts = [i for i, k in run if k == "content"]
        calls = [_neutral_call(i) for i, k in run if k == "call"]
        m: dict[str, Any] = {"role": "assistant", "content": _run_content(texts, bool(calls)),
                             SRC: len(self.where)}
        if calls:
            m["tool_calls"] = calls
        held = [i for i, k in run if k == "opaque"]
        if held:
            m[OPAQUE] = held
        self.where.append((first, len(run)))
        self.messages.append(m)

    def _fill_raw(self) -> None:
        """The containers, with each item's exact text (only needed to splice)."""
        spans = array_spans(self.text, self.spans["input"][0])
        items = self.data["input"]
        by_src = {m[SRC]: m for m in self.messages if m[SRC] != INSTRUCTIONS}
        self.containers = []
        for src, (first, count) in enumerate(self.where):
            units = [_unit(items[n], self.text[slice(*spans[n])]) for n in range(first, first + count)]
            bounds = (spans[first][0], spans[first + count - 1][1])
            self.containers.append(Container(units, [by_src[src]], raw=self.text[slice(*bounds)],
                                             bounds=bounds))

    def parsed(self) -> Parsed:
        d = self.data
        chat = neutral_body(d.get("model"), self.messages, d.get("tools"), d.get("max_output_tokens"))
        notes = {"server_state": self.server_state} if self.server_state else {}
        return Parsed(d, chat, d.get("stream") is True, self.splice, notes, self.rewritable, self.over)

    def splice(self, messages: list[Any]) -> bytes:
        gs = groups(messages)
        edits: list[tuple[tuple[int, int], str]] = []
        if self.messages and self.messages[0].get(SRC) == INSTRUCTIONS:
            first = gs.pop(0) if gs and gs[0].src == INSTRUCTIONS else None
            if first is None or len(first.messages) != 1 or not isinstance(
                    first.messages[0].get("content"), str):
                raise ValueError("the instructions message was removed or reshaped")
            if first.messages[0] != self.messages[0]:
                edits.append((self.spans["instructions"], dumps(first.messages[0]["content"])))
        if any(g.src == INSTRUCTIONS for g in gs):
            raise ValueError("the instructions message was moved")
        if "input" in self.spans:
            edits.append((self.spans["input"], self._input(gs)))
        return replace_spans(self.text, edits)

    def _input(self, gs: list[Group]) -> str:
        begin, end = self.spans["input"]
        if isinstance(self.data["input"], str):
            if len(gs) == 1 and gs[0].src == 0 and gs[0].messages == self.messages[-1:]:
                return self.text[begin:end]
            return "[" + ",".join(i for g in gs for m in g.messages for i in _new_items(m)) + "]"
        self._fill_raw()
        pieces = [p for g in gs for p in self._group(g)]
        return join_pieces(self.text, self.containers, pieces, begin, end)

    def _group(self, g: Group) -> list[tuple[int | None, str]]:
        if g.src is None:
            return [(None, i) for m in g.messages for i in _new_items(m)]
        c = self.containers[g.src]
        if g.messages == c.messages:
            return [(g.src, c.raw)]
        first_text = next((u.obj for u in c.units if u.kind == "content"), None)
        items = rebuild_units(c, g, lambda m: [i for i in [_message_item(first_text, m)] if i],
                              _patch_call, _patch_result, _new_call)
        return [(None, i) for i in items]


def parse(raw: bytes, path: str = "", max_items: int = 0) -> Parsed:
    """The request (``path``: where it was sent; this API reads everything from the body;
    ``max_items``: past that many neutral messages, read the head only)."""
    return ResponsesRequest(raw, max_items).parsed()

