"""Offline token counting with tiktoken.

The litellm wheel ships tiktoken's cl100k_base and o200k_base files already named as
tiktoken's cache expects; ``TIKTOKEN_CACHE_DIR`` is pointed there before the first
encoding loads, so nothing is downloaded. Counts follow OpenAI's cookbook recipe:
3 tokens per message, 1 more for a name, 3 to prime the reply, plus the tool schemas.

Message contents repeat across requests (clients resend the whole history), so the
count of each string is cached; a request costs what is new in it. Short strings are
cached as themselves (an ``lru_cache``: at most ``SHORT_ENTRIES`` x 256 characters);
longer ones under a 16-byte BLAKE2b digest in a ``BoundedCache`` with an entry and a
byte cap, so a history of multi-megabyte tool outputs costs bytes, not megabytes, each.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
from dataclasses import dataclass
from typing import Any

import tiktoken

from context_engine.proxy.engine.types import Message
from context_engine.proxy.store.memo import SHORT, BoundedCache

DEFAULT_ENCODING = "o200k_base"
PER_MESSAGE = 3
PER_NAME = 1
REPLY_PRIMING = 3
IMAGE_PART_TOKENS = 85  # a low-detail image; the proxy never rewrites images
SHORT_ENTRIES = 20_000
LONG_COUNTS: BoundedCache[tuple[str, bytes], int] = BoundedCache(100_000, 32 * 1024 * 1024)


def _point_cache_at_litellm() -> None:
    if os.environ.get("TIKTOKEN_CACHE_DIR"):
        return
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return
    root = list(spec.submodule_search_locations)[0]
    folder = os.path.join(root, "litellm_core_utils", "tokenizers")
    if os.path.isdir(folder):
        os.environ["TIKTOKEN_CACHE_DIR"] = folder


_O200K_PREFIXES = ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o")
_CL100K_PREFIXES = ("gpt-4", "gpt-3.5", "gpt-35", "text-embedding-3", "text-embedding-ada")


def encoding_for_model(model: str) -> tuple[str, bool]:
    """The encoding name for ``model`` and whether it is a fallback guess."""
    name = model.rsplit("/", 1)[-1].lower()
    if name.startswith(_O200K_PREFIXES):
        return "o200k_base", False
    if name.startswith(_CL100K_PREFIXES):
        return "cl100k_base", False
    return DEFAULT_ENCODING, True


@functools.lru_cache(maxsize=4)
def get_encoding(name: str) -> tiktoken.Encoding:
    _point_cache_at_litellm()
    return tiktoken.get_encoding(name)


@dataclass(frozen=True)
class TokenCounter:
    """Counts tokens of strings, messages and requests for one encoding."""

    encoding: str = DEFAULT_ENCODING

    def text(self, s: str) -> int:
        if len(s) <= SHORT:
            return _count_short(self.encoding, s)
        key = (self.encoding, hashlib.blake2b(s.encode("utf-8", "surrogatepass"), digest_size=16).digest())
        n = LONG_COUNTS.get(key)
        if n is None:
            n = _count(self.encoding, s)
            LONG_COUNTS.put(key, n)
        return n  # type: ignore[no-any-return]

    def message(self, m: Message | dict[str, Any]) -> int:
        n = PER_MESSAGE + self.text(str(m.get("role", "")))
        content = m.get("content")
        if isinstance(content, str):
            n += self.text(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    n += self.text(part["text"])
                elif isinstance(part, dict):
                    n += IMAGE_PART_TOKENS
        calls = m.get("tool_calls")
        for call in calls if isinstance(calls, list) else ():
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict):
                n += self.text(str(fn.get("name", ""))) + self.text(str(fn.get("arguments", "")))
        if m.get("name"):
            n += PER_NAME + self.text(str(m["name"]))
        return n

    def messages(self, messages: list[Any]) -> int:
        return sum(self.message(m) for m in messages) + REPLY_PRIMING

    def tools(self, tools: list[dict[str, Any]] | None) -> int:
        if not tools:
            return 0
        return self.text(json.dumps(tools, sort_keys=True, separators=(",", ":")))

    def request(self, messages: list[Any], tools: list[dict[str, Any]] | None = None) -> int:
        return self.messages(messages) + self.tools(tools)


def _count(encoding: str, s: str) -> int:
    if not s:
        return 0
    return len(get_encoding(encoding).encode_ordinary(s))


_count_short = functools.lru_cache(maxsize=SHORT_ENTRIES)(_count)


def counter_for_model(model: str) -> tuple[TokenCounter, bool]:
    name, fallback = encoding_for_model(model)
    return TokenCounter(name), fallback
