"""Gemini Interactions API (``POST /v1beta/interactions``, ``/v1/interactions``) ⇄ the
neutral form.

``system_instruction`` (a string) becomes a leading system message. ``input`` as a list
of steps becomes containers, as the Responses API's items do: each ``user_input`` step
and each ``function_result`` stands alone; a run of the model's steps (``model_output``,
``function_call``, ``thought`` and every other step) becomes one assistant message with
``tool_calls`` (``steps`` says which step is which unit). Any other ``input`` (a string,
one content, a list of contents) is one user turn.

With ``previous_interaction_id`` the server holds the history: only ``input`` is
rewritten (``system_instruction`` is left out of the neutral form) and the notes say so
(``server_state``), as for the Responses API's ``previous_response_id``. Every other
field (``tools``, ``generation_config``, ``store``, ``agent_config``, …) keeps its bytes.
"""

from __future__ import annotations

import json
from typing import Any

from context_engine.proxy.dialects.base import (
    HEAD,
    SYSTEM,
    Container,
    Group,
    Parsed,
    Unit,
    changed_system,
    dumps,
    groups,
    join_pieces,
    neutral_body,
    rebuild_units,
)
from context_engine.proxy.dialects.interactions.steps import (
    call_step,
    content_texts,
    is_steps,
    is_text,
    message_count,
    model_text,
    neutral_call,
    result_text,
    result_value,
    step_kind,
    user_content,
)
from context_engine.proxy.dialects.jsonspan import (
    array_spans,
    decode_request,
    replace_spans,
    value_start,
)
from context_engine.proxy.engine.opaque import OPAQUE, PLACEHOLDER, SRC
from context_engine.proxy.errors import BadRequest

STATE = "previous_interaction_id"


def _check(data: dict[str, Any]) -> None:
    for key in ("model", "agent", "system_instruction", STATE):
        if key in data and not isinstance(data[key], (str, type(None))):
            raise BadRequest(f"'{key}' must be a string.", param=key)
    items = data.get("input")
    if items is None or isinstance(items, (str, dict)):
        return
    if not isinstance(items, list):
        raise BadRequest("'input' must be a string, a content or an array of steps or contents.",
                         param="input")
    for n, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("type"), str):
            raise BadRequest(f"input[{n}]: each step or content must be an object with a 'type'.",
                             param="input")
        if item["type"] in ("user_input", "model_output") and not isinstance(item.get("content", []), list):
            raise BadRequest(f"input[{n}].content: must be an array of contents.", param="input")


def _never(*_: Any) -> str:
    raise ValueError("a step the rules cannot make here")


def _model_output(base: dict[str, Any] | None, m: dict[str, Any]) -> list[str]:
    """The model's rewritten text as one ``model_output`` step (the first one's other keys)."""
    texts = content_texts(m.get("content"), [])
    if not texts:
        return []
    return [dumps({**(base or {"type": "model_output"}), "content": [json.loads(t) for t in texts]})]


class InteractionsRequest:
    def __init__(self, raw: bytes, max_items: int = 0) -> None:
        self.text, self.data, self.spans, self.rewritable = decode_request(raw, BadRequest)
        _check(self.data)
        self.server_state = STATE if self.data.get(STATE) else ""
        self.messages: list[dict[str, Any]] = []
        self.where: list[tuple[int, int]] = []  # each container's first step and step count
        self.containers: list[Container] = []  # built by _fill_raw
        self.names: dict[str, str] = {}  # call id -> function name
        system = self.data.get("system_instruction")
        if isinstance(system, str) and not self.server_state:
            self.messages.append({"role": "system", "content": system, SRC: SYSTEM})
        items = self.data.get("input")
        self.steps = isinstance(items, list) and is_steps(items)
        self.over = False
        if isinstance(items, list) and self.steps:
            self.over = max_items > 0 and message_count(items) > max_items
            self._read_steps(items[:HEAD] if self.over else items)
        elif items is not None:
            content, held = user_content({"content": [items] if isinstance(items, dict) else items}) \
                if not isinstance(items, str) else (items, [])
            m: dict[str, Any] = {"role": "user", "content": content, SRC: 0}
            if held:
                m[OPAQUE] = held
            self.messages.append(m)

    def _read_steps(self, items: list[Any]) -> None:
        run: list[tuple[dict[str, Any], str]] = []  # the current run of the model's steps
        for n, step in enumerate(items):
            kind = step_kind(step)
            if kind in ("call", "content", "opaque"):
                run.append((step, kind))
                continue
            if run:
                self._run(run, n - len(run))
                run = []
            m: dict[str, Any] = {SRC: len(self.where)}
            if kind == "message":
                content, held = user_content(step)
                m.update(role="user", content=content)
                if held:
                    m[OPAQUE] = held
            else:
                m.update(role="tool", tool_call_id=step["call_id"], content=result_text(step.get("result")))
            self.where.append((n, 1))
            self.messages.append(m)
        if run:
            self._run(run, len(items) - len(run))

    def _run(self, run: list[tuple[dict[str, Any], str]], first: int) -> None:
        texts = [p for s, k in run if k == "content" for p in model_text(s)]
        calls = [neutral_call(s) for s, k in run if k == "call"]
        for c in calls:
            self.names[c["id"]] = c["function"]["name"]
        content: Any = texts[0]["text"] if len(texts) == 1 else texts or (None if calls else [PLACEHOLDER])
        m: dict[str, Any] = {"role": "assistant", "content": content, SRC: len(self.where)}
        if calls:
            m["tool_calls"] = calls
        held = [s for s, k in run if k == "opaque"]
        if held:
            m[OPAQUE] = held
        self.where.append((first, len(run)))
        self.messages.append(m)

    def parsed(self) -> Parsed:
        d = self.data
        tools = [{"type": "function", "function": {
            "name": t.get("name", ""), "description": t.get("description", ""),
            "parameters": t.get("parameters") or {"type": "object"}}}
            for t in d.get("tools") or () if isinstance(t, dict) and t.get("type") == "function"]
        config = d.get("generation_config")
        limit = config.get("max_output_tokens") if isinstance(config, dict) else None
        chat = neutral_body(d.get("model"), self.messages, tools or None, limit)
        notes = {"server_state": self.server_state} if self.server_state else {}
        return Parsed(d, chat, d.get("stream") is True, self.splice, notes, self.rewritable, self.over)

    # --- back into the client's bytes -------------------------------------------------

    def splice(self, messages: list[Any]) -> bytes:
        gs = groups(messages)
        edits: list[tuple[tuple[int, int], str]] = []
        system = changed_system(gs, self.messages)
        if system is not None:
            if not isinstance(system.get("content"), str):
                raise ValueError("the system instruction was reshaped")
            edits.append((self.spans["system_instruction"], dumps(system["content"])))
        if any(g.src == SYSTEM for g in gs):
            raise ValueError("the system instruction was moved")
        if self.data.get("input") is not None:
            edits.append((self.spans["input"], self._input(gs)))
        elif gs:
            raise ValueError("a request without input gained messages")
        return replace_spans(self.text, edits)

    def _input(self, gs: list[Group]) -> str:
        begin, end = self.spans["input"]
        if not self.steps:
            if len(gs) == 1 and gs[0].src == 0 and gs[0].messages == self.messages[-1:]:
                return self.text[begin:end]
            return "[" + ",".join(s for g in gs for s in self._plain_group(g)) + "]"
        self._fill_raw()
        pieces = [p for g in gs for p in self._group(g)]
        return join_pieces(self.text, self.containers, pieces, begin, end)

    def _plain_group(self, g: Group) -> list[str]:
        """Steps for a group of a request whose ``input`` was one user turn."""
        if g.src == 0 and g.messages == self.messages[-1:]:
            items = self.data["input"]
            contents = [{"type": "text", "text": items}] if isinstance(items, str) else \
                [items] if isinstance(items, dict) else items
            return [dumps({"type": "user_input", "content": contents})]
        return [s for m in g.messages for s in self._new_steps(m)]

    def _fill_raw(self) -> None:
        """The containers, with each unit's exact text (only needed to splice)."""
        spans = array_spans(self.text, self.spans["input"][0])
        items = self.data["input"]
        by_src: dict[int, list[dict[str, Any]]] = {}
        for m in self.messages:
            if m[SRC] != SYSTEM:
                by_src.setdefault(m[SRC], []).append(m)
        self.containers = []
        for src, (first, count) in enumerate(self.where):
            bounds = (spans[first][0], spans[first + count - 1][1])
            units: list[Unit] = []
            for n in range(first, first + count):
                step, raw = items[n], self.text[slice(*spans[n])]
                kind = step_kind(step)
                if kind == "message":
                    units += self._contents(step, spans[n][0])
                else:
                    key = step["id"] if kind == "call" else step["call_id"] if kind == "result" else ""
                    units.append(Unit(kind, step, key, raw))
            self.containers.append(Container(units, by_src.get(src, []), items[first],
                                             self.text[slice(*bounds)], bounds))

    def _contents(self, step: dict[str, Any], begin: int) -> list[Unit]:
        if "content" not in step:
            return []
        spans = array_spans(self.text, value_start(self.text, begin, "content"))
        return [Unit("content" if is_text(c) else "opaque", c, "", self.text[b:e])
                for c, (b, e) in zip(step["content"], spans)]

    def _group(self, g: Group) -> list[tuple[int | None, str]]:
        if g.src is None:
            return [(None, s) for m in g.messages for s in self._new_steps(m)]
        c = self.containers[g.src]
        if g.messages == c.messages:
            return [(g.src, c.raw)]
        kind = step_kind(c.obj)
        if kind == "message":
            return [(None, s) for s in self._user_step(c, g)]
        if kind == "result":
            res = g.results().get(c.obj["call_id"])
            return [] if res is None else [(None, dumps(
                {**c.obj, "result": result_value(c.obj.get("result"), res.get("content"))}))]
        first = next((u.obj for u in c.units if u.kind == "content"), None)
        steps = rebuild_units(c, g, lambda m: _model_output(first, m),
                              lambda u, call: call_step(call, u.obj), _never, call_step)
        return [(None, s) for s in steps]

    def _user_step(self, c: Container, g: Group) -> list[str]:
        main = g.main
        if main is None:
            return []
        texts = [u for u in c.units if u.kind == "content"]
        built = rebuild_units(c, g, lambda m: content_texts(m.get("content"), texts), _never, _never, _never)
        if "content" not in c.obj:
            return [dumps({**c.obj, "content": [json.loads(b) for b in built]})]
        b = c.bounds[0]
        start = value_start(self.text, b, "content")
        spans = array_spans(self.text, start)
        end = self.text.index("]", spans[-1][1] if spans else start + 1) + 1
        return [self.text[b:start] + "[" + ",".join(built) + "]" + self.text[end:c.bounds[1]]]

    def _new_steps(self, m: dict[str, Any]) -> list[str]:
        """Steps for a message a rule made (it has no container)."""
        role = m.get("role")
        if role == "tool":
            cid = str(m.get("tool_call_id", ""))
            return [dumps({"type": "function_result", "call_id": cid, "name": self.names.get(cid, ""),
                           "result": result_value(None, m.get("content"))})]
        texts = content_texts(m.get("content"), [])
        if role == "assistant":
            out = [dumps({"type": "model_output", "content": [json.loads(t) for t in texts]})] \
                if texts else []
            return out + [call_step(c) for c in m.get("tool_calls") or ()]
        return [dumps({"type": "user_input", "content": [json.loads(t) for t in texts]})] if texts else []


def parse(raw: bytes, path: str = "", max_items: int = 0) -> Parsed:
    """The request (``path``: where it was sent; this API reads everything from the body;
    ``max_items``: past that many neutral messages, read the head only)."""
    return InteractionsRequest(raw, max_items).parsed()
