"""A fresh Chat Completions request holding a neutral conversation: the messages as
they are, without the dialects' container tags (opaque items have no place here)."""

from __future__ import annotations

import json
from typing import Any

from context_engine.proxy.dialects.writing import Opaque
from context_engine.proxy.engine.opaque import OPAQUE, SRC


def write(model: str, messages: list[Any], tools: Any, opaque: Opaque = None) -> tuple[str, bytes]:
    body: dict[str, Any] = {"model": model, "messages": [
        {k: v for k, v in m.items() if k not in (SRC, OPAQUE)} for m in messages]}
    if tools:
        body["tools"] = tools
    return "/v1/chat/completions", json.dumps(body, ensure_ascii=False).encode()
