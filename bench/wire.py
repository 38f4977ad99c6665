"""``bench --api responses|anthropic|gemini|interactions``: the cases as another wire format.

Each case's chat messages are written as a Responses, Anthropic Messages, Gemini
``generateContent`` or Gemini Interactions request and read back through that API's
dialect, so every system sees the conversation as the proxy sees it for that API. The project's engine runs the whole path of a request:
wire bytes → adapter → rules → splice into the bytes → adapter again for measuring.
``--opaque`` adds a reasoning item (Responses), a signed thinking block (Anthropic), a
signed thought part (Gemini) or a thought step (Interactions) to every assistant turn,
and the run counts requests whose opaque items reached the output byte for byte.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from context_engine.bench.cases import Case
from context_engine.proxy.dialects.jsonspan import object_spans
from context_engine.proxy.dialects.registry import BY_NAME, NAMES
from context_engine.proxy.engine.invariants import rewrite_problems
from context_engine.proxy.engine.opaque import OPAQUE, SRC

APIS = NAMES


OPAQUE_SAMPLES: dict[str, Callable[[int], dict[str, Any]]] = {
    "responses": lambda n: {"type": "reasoning", "id": f"rs_{n}", "summary": [],
                            "encrypted_content": f"gAAAAAB{n:06d}+/opaque=="},
    "anthropic": lambda n: {"type": "thinking", "thinking": "", "signature": f"Eq{n:06d}+/signed=="},
    "gemini": lambda n: {"text": "", "thought": True, "thoughtSignature": f"Cq{n:06d}+/signed=="},
    "interactions": lambda n: {"type": "thought", "signature": f"Cq{n:06d}+/signed=="},
}


def to_wire(api: str, model: str, messages: list[Any], tools: Any,
            opaque: bool = False) -> tuple[str, bytes]:
    """The case as a request of ``api`` (``Dialect.write``): its path and its body."""
    return BY_NAME[api].write(model, messages, tools, OPAQUE_SAMPLES.get(api) if opaque else None)


def strip(messages: list[Any], keys: tuple[str, ...] = (SRC,)) -> list[Any]:
    """Neutral messages without the adapter's container tags (opaque items stay, by default)."""
    return [{k: v for k, v in m.items() if k not in keys} for m in messages]


def neutral(api: str, raw: bytes, path: str = "") -> tuple[list[Any], Any]:
    parsed = BY_NAME[api].parse(raw, path)
    return strip(parsed.chat["messages"]), parsed.chat.get("tools")


def convert_case(case: Case, api: str, model: str, opaque: bool) -> Case:
    path, raw = to_wire(api, model, case.messages, case.tools, opaque)
    messages, tools = neutral(api, raw, path)
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
        from context_engine.bench.systems import Outcome, fired

        path, raw = to_wire(self.api, self.inner.model, messages, tools)
        parsed = BY_NAME[self.api].parse(raw, path)
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
        out, _ = neutral(self.api, out_raw, path)
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
                       reverted_because=list(rw.result.problems), recall=rw.recall,
                       epoch=fired(rw.result.ctx))


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
