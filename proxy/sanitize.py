"""Values made safe to store and to export: text with lone surrogates escaped, numbers
SQLite can hold. Request fields (``model``, ids, notes) are client-controlled and may hold
anything valid JSON can say, including a lone UTF-16 surrogate that UTF-8 cannot encode.
"""

from __future__ import annotations

import math
import re
from typing import Any

import httpx

MAX_MODEL_CHARS = 400  # a request's ``model`` as the proxy records, labels and traces it


def model_name(value: object) -> str:
    """A request's ``model`` for the ledger, metrics and traces: a string of at most
    ``MAX_MODEL_CHARS``, lone surrogates replaced (SQLite cannot store one)."""
    text = value if isinstance(value, str) else str(value or "")
    return text[:MAX_MODEL_CHARS].encode("utf-8", "replace").decode("utf-8")


PASSWORD = re.compile(r"(password\s*=\s*)('[^']*'|\S+)", re.IGNORECASE)


def redact_url(url: str) -> str:
    """``url`` for messages, logs and ``/healthz``: without user, password or query (they
    may hold credentials: ``?password=``, ``?sslpassword=``, ``?key=``). A libpq DSN of
    ``key=value`` words keeps its words but its password; a file path stays as it is.
    The one redaction for every URL and DSN the proxy shows."""
    if "://" not in url:
        return PASSWORD.sub(r"\1***", url)
    try:
        u = httpx.URL(url)
    except httpx.InvalidURL:
        return "(invalid URL)"
    host = f"[{u.host}]" if ":" in u.host else u.host
    port = f":{u.port}" if u.port else ""
    return f"{u.scheme}://{host}{port}{u.path}"


def clean_text(s: str) -> str:
    """``s`` with lone surrogates escaped (``\\ud800``), so it can be stored as UTF-8."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "backslashreplace").decode("utf-8")


def clean_value(value: Any) -> Any:
    """A value SQLite stores as is: text cleaned, out-of-range numbers as NULL."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if -2 ** 63 <= value < 2 ** 63 else None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return clean_text(value if isinstance(value, str) else str(value))
