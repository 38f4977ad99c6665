"""Seeded generator of request bodies: valid JSON of arbitrary shape, nesting, types and
Unicode, mostly chat-shaped (so they reach the rules), some arbitrary.

Hypothesis costs milliseconds per example here, too slow for 10,000 bodies through a
server in CI; this draws a body in about 0.1 ms, deterministically from its seed.
"""

from __future__ import annotations

import json
import random
from typing import Any

SPECIAL = ["", " ", "hi", "ok", "thanks", "{}", "[]", "null", '{"a": null, "b": [], "c": ""}',
           '[{"id": 1, "x": "a"}, {"id": 2, "x": "a"}]', "\ud800", "\udfff", "\ud83d", "\ud83d\ude00",
           "User: ignore that", "System: x", "<<zone:tool>>", "<</zone:tool>>", "\x00", "\u2028",
           "\ufeff", "é" * 3, "!" * 40, "a\nb\r\nc", "\\u0000", "ft:gpt-4o:org:x", "gpt-4o"]
ROLES = ["system", "developer", "user", "assistant", "tool", "function"]
PLANES = [(0x20, 0x7F), (0xA0, 0x800), (0x800, 0xD800), (0xD800, 0xE000), (0xE000, 0x10000),
          (0x10000, 0x110000), (0, 0x20)]
PLANE_WEIGHTS = [40, 15, 15, 3, 5, 10, 5]  # lone surrogates (0xD800-0xDFFF) now and then
MAX_BYTES = 16_000


class BodyGen:
    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)

    def text(self) -> str:
        r = self.r
        if r.random() < 0.3:
            return r.choice(SPECIAL)
        lo, hi = r.choices(PLANES, PLANE_WEIGHTS)[0]
        n = r.choice((0, 1, 2, 5, 12, 40))
        return "".join(chr(r.randrange(lo, hi)) for _ in range(n))

    def scalar(self) -> Any:
        r = self.r
        return r.choice((
            None, True, False, 0, -1, 2 ** 70, -(2 ** 63), r.randrange(-1000, 1000), 0.5, -0.0,
            1e308, 5e-324, r.random() * 1e6, self.text(), self.text(), self.text()))

    def value(self, depth: int = 0) -> Any:
        r = self.r
        if depth > 4 or r.random() < 0.5:
            return self.scalar()
        if r.random() < 0.5:
            return [self.value(depth + 1) for _ in range(r.randrange(4))]
        return {self.text(): self.value(depth + 1) for _ in range(r.randrange(4))}

    def deep(self) -> Any:
        out: Any = self.scalar()
        for _ in range(self.r.choice((30, 200, 900, 1500))):
            out = [out] if self.r.random() < 0.5 else {"k": out}
        return out

    def any(self) -> Any:
        r = self.r
        return self.deep() if r.random() < 0.02 else self.value() if r.random() < 0.7 else self.text()

    def part(self) -> Any:
        r = self.r
        if r.random() < 0.1:
            return self.any()
        part: dict[str, Any] = {"type": r.choice(["text", "text", "image_url", self.text()])}
        if r.random() < 0.8:
            part["text"] = self.text() if r.random() < 0.8 else self.any()
        if r.random() < 0.2:
            part["image_url"] = {"url": "data:image/png;base64,AAAA"} if r.random() < 0.5 else self.any()
        return part

    def tool_call(self) -> Any:
        r = self.r
        if r.random() < 0.1:
            return self.any()
        fn: Any = {"name": self.text(), "arguments": json.dumps(self.value())
                   if r.random() < 0.7 else self.any()}
        return {"id": self.text() if r.random() < 0.9 else self.any(), "type": "function",
                "function": fn if r.random() < 0.9 else self.any()}

    def message(self) -> Any:
        r = self.r
        if r.random() < 0.01:
            return self.any()
        m: dict[str, Any] = {"role": r.choice(ROLES) if r.random() < 0.98 else self.any()}
        roll = r.random()
        if roll < 0.6:
            m["content"] = self.text() if r.random() < 0.8 else json.dumps(self.value())
        elif roll < 0.8:
            m["content"] = [self.part() for _ in range(r.randrange(4))]
        elif roll < 0.9:
            m["content"] = None
        elif roll < 0.92:
            m["content"] = self.any()
        if r.random() < 0.15:
            m["tool_calls"] = [self.tool_call() for _ in range(r.randrange(3))] \
                if r.random() < 0.8 else self.any()
        if r.random() < 0.1:
            m["tool_call_id"] = self.text() if r.random() < 0.8 else self.any()
        if r.random() < 0.05:
            m["name"] = self.text() if r.random() < 0.8 else self.any()
        if r.random() < 0.05:
            m[self.text()] = self.any()
        return m

    def chat(self) -> dict[str, Any]:
        r = self.r
        messages = [self.message() for _ in range(r.randrange(1, 9))]
        if r.random() < 0.3:  # repeats, so folding rules have something to fold
            messages += [dict(m) if isinstance(m, dict) else m for m in messages[:3]]
        body: dict[str, Any] = {"model": r.choice(["gpt-4o", "gpt-4o-mini", "mock"])
                                if r.random() < 0.95 else self.any(),
                                "messages": messages if r.random() < 0.97 else self.any()}
        for key in ("stream", "tools", "temperature", "metadata", self.text()):
            if r.random() < 0.15:
                body[key] = self.any()
        items = list(body.items())
        r.shuffle(items)
        return dict(items)

    def body(self) -> bytes:
        """One request body, encoded as a client might (escaped or raw Unicode, spacing),
        at most ``MAX_BYTES`` long (long texts are the performance tests' business)."""
        for _ in range(10):
            raw = self._body()
            if len(raw) <= MAX_BYTES:
                return raw
        return b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "short"}]}'

    def _body(self) -> bytes:
        r = self.r
        value = self.chat() if r.random() < 0.92 else self.any()
        indent = 1 if r.random() < 0.05 else None
        separators = (",", ":") if r.random() < 0.5 else None
        try:
            text = json.dumps(value, ensure_ascii=r.random() < 0.6, indent=indent,
                              separators=separators)
        except RecursionError:
            return b'{"messages": "too deep to encode"}'
        # a lone surrogate written raw is not UTF-8: such bytes must get a 400
        return text.encode("utf-8", "surrogatepass")
