"""The text of an upstream's error answer, for the ledger's ``error`` column.

A provider answers a request it refuses with a JSON body (``{"error": {"message": …}}``,
Anthropic's ``{"type": "error", "error": {…}}``, Gemini's ``{"error": {"message": …}}``);
its message, at most ``MAX_CHARS`` characters, says why (a 400 on a rewritten request
then reads in ``report --quality``). Anything else: the body's first characters if they
are UTF-8 text (a compressed body is not read), else the status alone.
"""

from __future__ import annotations

import json

MAX_CHARS = 300  # a provider's message is a sentence; the row must stay small
MAX_BODY = 64 * 1024  # a larger error body is not parsed, only cut


def error_text(body: bytes, status: int) -> str:
    """``status`` and the error's message (``""`` below 400)."""
    if status < 400:
        return ""
    message = ""
    if len(body) <= MAX_BODY:
        try:
            data = json.loads(body)
        except ValueError:
            data = None
        inner = data.get("error") if isinstance(data, dict) else None
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            message = inner["message"]
        elif isinstance(inner, str):
            message = inner
    if not message:
        try:  # compressed or binary bytes are not text: the status alone
            message = body[:MAX_CHARS].decode("utf-8")
        except UnicodeDecodeError:
            message = ""
    return f"upstream {status}: {message}"[:MAX_CHARS] if message else f"upstream {status}"
