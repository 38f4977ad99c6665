"""Gemini ``generateContent`` / ``streamGenerateContent`` ⇄ the neutral form.

The model and whether the reply streams come from the path
(``/v1beta/models/{model}:generateContent``, ``:streamGenerateContent``).
``systemInstruction`` becomes a leading system message. Each of ``contents`` is a
container: a ``model`` content becomes one assistant message whose ``functionCall``
parts are ``tool_calls``; any other becomes one ``tool`` message per
``functionResponse`` part plus a user message with its text parts. Calls without an
``id`` get one (``gemini-<content>-<part>``, never sent back), and a response answers
the oldest open call of its name. A response's text is its ``response`` object's only
string (Gemini CLI's ``{"output": ...}``), else the object as JSON. Text parts with
other keys (``thought``, ``thoughtSignature``), ``inlineData``, ``fileData``, code
parts and unknown parts are opaque: they go back as their exact text.
``cachedContent``, ``tools``, ``toolConfig``, ``generationConfig`` and every other
field keep their bytes.

On the way back a changed content keeps its bytes outside ``parts``; same-role
neighbours the rewrite made neighbours become one content.
"""

from __future__ import annotations

import json
from typing import Any

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
)
from context_engine.proxy.dialects.gemini.parts import (
    ROLES,
    SYNTHETIC,
    OpenCalls,
    call_part,
    kind,
    message_count,
    model_of,
    result_text,
    result_value,
    text_parts,
)
from context_engine.proxy.dialects.jsonspan import (
    array_spans,
    decode_request,
    replace_spans,
    value_start,
)
from context_engine.proxy.dialects.turns import RESULT, Out, merge
from context_engine.proxy.engine.opaque import OPAQUE, PLACEHOLDER, SRC
from context_engine.proxy.errors import BadRequest

TEXT = ("text",)


class GenerateContentRequest:
    def __init__(self, raw: bytes, path: str, max_items: int = 0) -> None:
        self.text, self.data, self.spans, self.rewritable = decode_request(raw, BadRequest)
        self.model, self.stream = model_of(path)
        self._check()
        self.over = max_items > 0 and message_count(self.data) > max_items
        self.containers: list[Container] = []  # built by _fill_raw
        self.messages: list[dict[str, Any]] = []
        self.names: dict[str, str] = {}  # call id -> function name
        self.open = OpenCalls()  # calls not answered yet
        self.meta: dict[str, tuple[str, str]] = {}
        system = self.data.get("systemInstruction")
        if isinstance(system, dict) and system.get("parts"):
            parts = [{"type": "text", "text": p["text"]} if kind("user", p) == "content" else p
                     for p in system["parts"]]
            self.messages.append({"role": "system", "content": plain_text(parts, TEXT), SRC: SYSTEM})
        for i, c in enumerate(self.data.get("contents") or ()):
            if self.over and head_read(self.messages, i, c["parts"]):  # over the cap: the head only
                break
            self._read(i, c)

    def _check(self) -> None:
        contents = self.data.get("contents")
        if not isinstance(contents, list):
            raise BadRequest("contents: an array of contents is required")
        for i, c in enumerate(contents):
            if not isinstance(c, dict) or not isinstance(c.get("parts"), list) or \
                    not isinstance(c.get("role", ""), str):
                raise BadRequest(f"contents[{i}]: needs a 'parts' array (and a string 'role')")
            if any(kind(c.get("role", ""), p) == "bad" for p in c["parts"]):
                raise BadRequest(f"contents[{i}].parts: each part must be an object")
        system = self.data.get("systemInstruction")
        if system is not None and not (isinstance(system, dict) and isinstance(
                system.get("parts", []), list) and all(isinstance(p, dict) for p in system.get("parts", []))):
            raise BadRequest("systemInstruction: must be a content with a 'parts' array")

    def _read(self, i: int, c: dict[str, Any]) -> None:
        role = c.get("role") or "user"
        if role not in ROLES:  # a role this dialect does not know: the whole content is opaque
            self.messages.append({"role": "user", "content": [PLACEHOLDER], SRC: i, OPAQUE: [c]})
            return
        neutral, texts, calls, held = [], [], [], []
        for j, part in enumerate(c["parts"]):
            k = kind(role, part)
            if k == "content":
                texts.append({"type": "text", "text": part["text"]})
            elif k == "opaque":
                held.append(part)
            elif k == "call":
                fc = part["functionCall"]
                cid = str(fc.get("id") or f"{SYNTHETIC}{i}-{j}")
                self.names[cid] = str(fc.get("name", ""))
                self.open.add(self.names[cid], cid)
                calls.append({"id": cid, "type": "function", "function": {
                    "name": self.names[cid], "arguments": dumps(fc.get("args", {}))}})
            else:
                fr = part["functionResponse"]
                neutral.append({"role": "tool", "tool_call_id": self._answers(fr, i, j),
                                "content": result_text(fr.get("response")), SRC: i})
        if texts or calls or held or not c["parts"]:
            main: dict[str, Any] = {"role": "assistant" if role == "model" else "user",
                                    "content": plain_text(texts, TEXT) or (None if calls else [PLACEHOLDER]),
                                    SRC: i}
            if calls:
                main["tool_calls"] = calls
            if held:
                main[OPAQUE] = held
            neutral.append(main)
        self.messages.extend(neutral)

    def _answers(self, fr: dict[str, Any], i: int, j: int) -> str:
        """The call a ``functionResponse`` answers: its ``id``, else the oldest open call
        of its name."""
        name, given = str(fr.get("name", "")), fr.get("id")
        if given:
            found = self.open.take_id(given) if isinstance(given, str) else None
        else:
            found = self.open.take_name(name)
        return found if found is not None else str(given or f"{SYNTHETIC}{i}-{j}")

    def _fill_raw(self) -> None:
        """The containers (one per content), with each part's exact text (only to splice)."""
        self.containers = containers_of(self.text, self.spans["contents"][0], self.data["contents"],
                                        self.messages)
        for c in self.containers:
            b = c.bounds[0]
            role = c.obj.get("role") or "user"
            if role not in ROLES:
                c.units = [Unit("opaque", c.obj, "", c.raw)]
                continue
            ids = iter(m for m in c.messages if m.get("role") == "tool")
            calls = iter((c.messages[-1] if c.messages else {}).get("tool_calls") or ())
            for p, (pb, pe) in zip(c.obj["parts"], array_spans(self.text, value_start(self.text, b, "parts"))):
                k = kind(role, p)
                key = str(next(calls)["id"]) if k == "call" else \
                    str(next(ids)["tool_call_id"]) if k == "result" else ""
                c.units.append(Unit(k, p, key, self.text[pb:pe]))
            for u in c.units:
                self.meta[u.raw] = (RESULT if u.kind == "result" else u.kind, u.key)

    def parsed(self) -> Parsed:
        d = self.data
        tools = [{"type": "function", "function": {
            "name": f.get("name", ""), "description": f.get("description", ""),
            "parameters": f.get("parameters") or f.get("parametersJsonSchema") or {"type": "object"}}}
            for t in d.get("tools") or () if isinstance(t, dict)
            for f in t.get("functionDeclarations") or () if isinstance(f, dict)]
        config = d.get("generationConfig")
        limit = config.get("maxOutputTokens") if isinstance(config, dict) else None
        chat = neutral_body(self.model or d.get("model"), self.messages, tools or None, limit)
        return Parsed(d, chat, self.stream, self.splice, rewritable=self.rewritable, over=self.over)

    def splice(self, messages: list[Any]) -> bytes:
        gs = groups(messages)
        edits: list[tuple[tuple[int, int], str]] = []
        system = changed_system(gs, self.messages)
        if system is not None:
            edits.append((self._system_parts(), self._system(system.get("content"))))
        self._fill_raw()
        outs = merge([o for g in gs for o in self._group(g)], self._kind_of)
        pieces = [(o.src, o.raw or '{"role":' + dumps(o.role) + ',"parts":[' + ",".join(o.blocks) + "]}")
                  for o in outs]
        begin, end = self.spans["contents"]
        edits.append(((begin, end), join_pieces(self.text, self.containers, pieces, begin, end)))
        return replace_spans(self.text, edits)

    def _system_parts(self) -> tuple[int, int]:
        start = value_start(self.text, self.spans["systemInstruction"][0], "parts")
        spans = array_spans(self.text, start)
        return start, self.text.index("]", spans[-1][1] if spans else start + 1) + 1

    def _system(self, content: Any) -> str:
        start, _ = self._system_parts()
        originals = [Unit("content", p, raw=self.text[b:e]) for p, (b, e) in
                     zip(self.data["systemInstruction"]["parts"], array_spans(self.text, start))]
        return "[" + ",".join(text_parts(content, originals)) + "]"

    def _group(self, g: Group) -> list[Out]:
        if g.src == SYSTEM:
            raise ValueError("the system instruction was moved")
        if g.src is None:
            return [self._new_out(m) for m in g.messages]
        c = self.containers[g.src]
        role = c.obj.get("role") or "user"
        if g.messages == c.messages or role not in ROLES:
            return [Out(role, [u.raw for u in c.units], g.src, c.raw, g.src)]
        originals = [u for u in c.units if u.kind == "content"]
        built = rebuild_units(c, g, lambda m: text_parts(m.get("content"), originals),
                              lambda u, call: call_part(call, u.obj), self._patch_result,
                              call_part)
        if not built:
            return []
        start = value_start(self.text, c.bounds[0], "parts")
        spans = array_spans(self.text, start)
        end = self.text.index("]", spans[-1][1] if spans else start + 1) + 1
        raw = self.text[c.bounds[0]:start] + "[" + ",".join(built) + "]" + self.text[end:c.bounds[1]]
        return [Out(role, built, raw=raw, orig=g.src)]

    def _patch_result(self, u: Unit, m: dict[str, Any]) -> str:
        fr = u.obj["functionResponse"]
        return dumps({**u.obj, "functionResponse": {
            **fr, "response": result_value(fr.get("response"), m.get("content"))}})

    def _new_out(self, m: dict[str, Any]) -> Out:
        """A message a rule made: system/developer text goes in as user text."""
        role = m.get("role")
        if role == "tool":
            cid = str(m.get("tool_call_id", ""))
            fr: dict[str, Any] = {"name": self.names.get(cid, ""),
                                  "response": result_value(None, m.get("content"))}
            if cid and not cid.startswith(SYNTHETIC):
                fr["id"] = cid
            return Out("user", [dumps({"functionResponse": fr})])
        parts = text_parts(m.get("content"), [])
        if role == "assistant":
            return Out("model", parts + [call_part(c) for c in m.get("tool_calls") or ()])
        return Out("user", parts)

    def _kind_of(self, part: str) -> tuple[str, str]:
        known = self.meta.get(part)
        if known is None:
            p = json.loads(part)
            known = (RESULT, "") if "functionResponse" in p else ("part", "")
            self.meta[part] = known
        return known


def parse(raw: bytes, path: str = "", max_items: int = 0) -> Parsed:
    """The request (``max_items``: past that many neutral messages, read the head only)."""
    return GenerateContentRequest(raw, path, max_items).parsed()
