"""Anthropic Messages (``POST /v1/messages``) ⇄ the neutral form.

``system`` (a string or text blocks) becomes a leading system message. Each message
is a container: a user message becomes one ``tool`` message per ``tool_result`` block
plus a user message with its other blocks; an assistant message becomes one assistant
message whose ``tool_use`` blocks are ``tool_calls``. Blocks keep their keys
(``cache_control`` included; a ``tool_result``'s sits on its tool message, so rules and
the bill see the client's breakpoints, and goes back with the rewritten result). ``thinking``, ``redacted_thinking``, server tool blocks,
``compaction`` and unknown blocks are opaque: they go back as their exact text.

After a rewrite the messages are written back so the request stays valid: neighbours
of the same role merge, a cut that leaves an assistant message first gets a short user
message in front, and every ``tool_result`` must answer a ``tool_use`` of
the message before it, or the rewrite is refused (the original goes out).
"""

from __future__ import annotations

import json
from typing import Any

from context_engine.proxy.dialects.anthropic.counting import (
    KINDS,
    ROLES,
    bad_message,
    block_kind,
    message_count,
)
from context_engine.proxy.dialects.anthropic.turns import Out, valid_turns
from context_engine.proxy.dialects.base import (
    SYSTEM,
    Container,
    Group,
    Parsed,
    Unit,
    changed_system,
    containers_of,
    dumps,
    groups,
    head_read,
    join_pieces,
    neutral_body,
    plain_text,
    rebuild_units,
    same_raw,
)
from context_engine.proxy.dialects.jsonspan import (
    array_spans,
    decode_request,
    replace_spans,
    value_start,
)
from context_engine.proxy.dialects.memo import TranslationMemo
from context_engine.proxy.engine.opaque import OPAQUE, PLACEHOLDER, SRC
from context_engine.proxy.engine.prefix import MARK
from context_engine.proxy.errors import BadRequest

TEXT = ("text",)

MEMO = TranslationMemo()


def _check(data: dict[str, Any]) -> None:
    if "model" in data and not isinstance(data["model"], str):
        raise BadRequest("model: Input should be a valid string")
    system = data.get("system")
    if system is not None and not isinstance(system, str) and not (
            isinstance(system, list) and all(isinstance(b, dict) and isinstance(b.get("type"), str)
                                             for b in system)):
        raise BadRequest("system: Input should be a string or a list of text blocks")
    if not isinstance(data.get("messages"), list):
        raise BadRequest("messages: Field required (an array of messages)")


def _neutral_call(block: dict[str, Any]) -> dict[str, Any]:
    return {"id": block["id"], "type": "function",
            "function": {"name": block.get("name", ""), "arguments": dumps(block.get("input", {}))}}


def _blocks(content: Any, originals: list[Unit]) -> list[str]:
    """Block texts for neutral content: an unchanged block keeps its original text."""
    if isinstance(content, str):
        return [dumps({"type": "text", "text": content})] if content else []
    out = []
    same = same_raw(originals)
    for p in content or ():
        if p == PLACEHOLDER:
            continue
        out.append(same(p) or dumps(p))
    return out


def _patch_call(u: Unit, call: dict[str, Any]) -> str:
    fn = call.get("function") or {}
    return dumps({**u.obj, "name": fn.get("name", ""), "input": json.loads(fn.get("arguments") or "{}")})


def _result_content(content: Any) -> Any:
    return content if isinstance(content, str) else [json.loads(b) for b in _blocks(content, [])]


def _patch_result(u: Unit, m: dict[str, Any]) -> str:
    mark = {MARK: m[MARK]} if MARK in m else {}
    content = m.get("content")
    if isinstance(content, str) and isinstance(u.obj.get("content"), list):
        content = [{"type": "text", "text": content}]  # the client's form (see plain_text)
    return dumps({**{k: v for k, v in u.obj.items() if k != MARK}, "content": _result_content(content),
                  **mark})


def _new_call(call: dict[str, Any]) -> str:
    fn = call.get("function") or {}
    return dumps({"type": "tool_use", "id": call.get("id", ""), "name": fn.get("name", ""),
                  "input": json.loads(fn.get("arguments") or "{}")})


def _tool_content(block: dict[str, Any]) -> Any:
    content = block.get("content")
    return plain_text(content, TEXT) if isinstance(content, (str, list)) else ""


def _new_out(m: dict[str, Any]) -> Out:
    """A message a rule made: system/developer text goes in as user text."""
    role = m.get("role")
    if role == "tool":
        block = {"type": "tool_result", "tool_use_id": m.get("tool_call_id", ""),
                 "content": _result_content(m.get("content"))}
        return Out("user", [dumps(block)])
    blocks = _blocks(m.get("content"), [])
    if role == "assistant":
        return Out("assistant", blocks + [_new_call(c) for c in m.get("tool_calls") or ()])
    return Out("user", blocks)


class MessagesRequest:
    def __init__(self, raw: bytes, max_items: int = 0) -> None:
        self.text, self.data, self.spans, self.rewritable = decode_request(raw, BadRequest)
        _check(self.data)
        self.over = max_items > 0 and message_count(self.data) > max_items
        self.containers: list[Container] = []  # built by _fill_raw
        self.messages: list[dict[str, Any]] = []
        self.meta: dict[str, tuple[str, str]] = {}
        system = self.data.get("system")
        if system:
            self.messages.append({"role": "system", "content": plain_text(system, TEXT),
                                  SRC: SYSTEM})
        own = len(self.messages)
        messages, span = self.data["messages"], self.spans["messages"]
        if self.over:  # over the cap: the head only, and nothing kept
            for i in range(len(messages)):
                if head_read(self.messages, i, messages[i].get("content")):
                    return
                self._read(i, messages[i])
            return
        kept = MEMO.find(self.text, span[0]) if self.rewritable else None
        if kept is not None:  # messages this conversation sent before, translated then
            self.messages.extend(kept[1])
        for i in range(kept[0] if kept else 0, len(messages)):
            self._read(i, messages[i])
        if self.rewritable and messages:
            cut = len(self.messages)
            while cut > own and self.messages[cut - 1][SRC] == len(messages) - 1:
                cut -= 1
            MEMO.keep(self.text, span, messages[-1],
                      (len(messages) - 1, tuple(self.messages[own:cut])))

    def _read(self, i: int, m: Any) -> None:
        """One message into its container and neutral messages (``BadRequest`` if invalid)."""
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise bad_message(i)
        role, content = m["role"], m.get("content")
        src = i
        if role not in ROLES:  # a role this adapter does not know: the whole message is opaque
            neutral = [{"role": "user", "content": [PLACEHOLDER], SRC: src, OPAQUE: [m]}]
        elif isinstance(content, str):
            neutral = [{"role": role, "content": content, SRC: src}]
        elif isinstance(content, list):
            neutral, parts, calls, held = [], [], [], []
            for j, blk in enumerate(content):
                kind = block_kind(i, j, role, blk)
                if kind == "content":
                    parts.append(blk)
                elif kind == "opaque":
                    held.append(blk)
                elif kind == "call":
                    calls.append(_neutral_call(blk))
                else:
                    neutral.append({"role": "tool", "tool_call_id": blk["tool_use_id"],
                                    "content": _tool_content(blk), SRC: src,
                                    **({MARK: blk[MARK]} if MARK in blk else {})})
            if parts or calls or held or not content:
                main: dict[str, Any] = {"role": role, "content": plain_text(parts, TEXT) or (
                    None if calls else [PLACEHOLDER]), SRC: src}
                if calls:
                    main["tool_calls"] = calls
                if held:
                    main[OPAQUE] = held
                neutral.append(main)
        else:
            raise bad_message(i)
        self.messages.extend(neutral)

    def _fill_raw(self) -> None:
        """The containers (one per message), with each block's exact text (only to splice)."""
        self.containers = containers_of(self.text, self.spans["messages"][0], self.data["messages"],
                                        self.messages)
        for c in self.containers:
            b = c.bounds[0]
            role, content = c.obj["role"], c.obj["content"]
            if role not in ROLES:
                c.units = [Unit("opaque", c.obj, "", c.raw)]
            elif isinstance(content, str):  # as a text block, should it merge with a neighbour
                block = {"type": "text", "text": content}
                c.units = [Unit("content", block, "", dumps(block))]
            else:
                kinds = KINDS.get(role, KINDS["user"])
                c.units = []
                for blk, (bb, be) in zip(content, array_spans(self.text, value_start(self.text, b, "content"))):
                    kind = kinds.get(blk["type"], "opaque")
                    key = blk["id"] if kind == "call" else blk["tool_use_id"] if kind == "result" else ""
                    c.units.append(Unit(kind, blk, key, self.text[bb:be]))
            for u in c.units:
                self.meta[u.raw] = (u.obj.get("type", "message"), u.key)

    def parsed(self) -> Parsed:
        d = self.data
        chat = neutral_body(d.get("model"), self.messages, d.get("tools"), d.get("max_tokens"))
        return Parsed(d, chat, d.get("stream") is True, self.splice, rewritable=self.rewritable,
                      over=self.over)

    def splice(self, messages: list[Any]) -> bytes:
        gs = groups(messages)
        edits: list[tuple[tuple[int, int], str]] = []
        system = changed_system(gs, self.messages)
        if system is not None:
            edits.append((self.spans["system"], self._system(system.get("content"))))
        self._fill_raw()
        sent = [Out(c.obj["role"], [u.raw for u in c.units], n)
                for n, c in enumerate(self.containers)]
        outs = valid_turns([o for g in gs for o in self._group(g)], sent, self._kind_of)
        pieces = [(o.src, o.raw or '{"role":' + dumps(o.role) + ',"content":[' + ",".join(o.blocks) + "]}")
                  for o in outs]
        begin, end = self.spans["messages"]
        edits.append(((begin, end), join_pieces(self.text, self.containers, pieces, begin, end)))
        return replace_spans(self.text, edits)

    def _system(self, content: Any) -> str:
        if isinstance(content, str):
            return dumps(content)
        spans = array_spans(self.text, self.spans["system"][0])
        originals = [Unit("content", blk, raw=self.text[b:e])
                     for blk, (b, e) in zip(self.data["system"], spans)]
        return "[" + ",".join(_blocks(content, originals)) + "]"

    def _group(self, g: Group) -> list[Out]:
        if g.src == SYSTEM:
            raise ValueError("the system prompt was moved")
        if g.src is None:
            return [_new_out(m) for m in g.messages]
        c = self.containers[g.src]
        if g.messages == c.messages or c.obj["role"] not in ROLES:
            return [Out(c.obj["role"], [u.raw for u in c.units], g.src, c.raw, g.src)]
        originals = [u for u in c.units if u.kind == "content"]
        built = rebuild_units(c, g, lambda m: _blocks(m.get("content"), originals),
                              _patch_call, _patch_result, _new_call)
        return [Out(c.obj["role"], built, orig=g.src)] if built else []

    def _kind_of(self, block: str) -> tuple[str, str]:
        known = self.meta.get(block)
        if known is None:
            b = json.loads(block)
            known = self.meta[block] = (str(b.get("type")), str(b.get("id") or b.get("tool_use_id") or ""))
        return known


def parse(raw: bytes, path: str = "", max_items: int = 0) -> Parsed:
    """The request (``path``: where it was sent; this API reads everything from the body;
    ``max_items``: past that many neutral messages, read the head only)."""
    return MessagesRequest(raw, max_items).parsed()
