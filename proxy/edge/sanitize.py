"""Values made safe to store and to export: text with lone surrogates escaped, numbers
SQLite can hold. Request fields (``model``, ids, notes) are client-controlled and may hold
anything valid JSON can say, including a lone UTF-16 surrogate that UTF-8 cannot encode.
"""

from __future__ import annotations

import math
from typing import Any

MAX_MODEL_CHARS = 400  # a request's ``model`` as the proxy records, labels and traces it


def model_name(value: object) -> str:
    """A request's ``model`` for the ledger, metrics and traces: a string of at most
    ``MAX_MODEL_CHARS``, lone surrogates replaced (SQLite cannot store one)."""
    text = value if isinstance(value, str) else str(value or "")
    return text[:MAX_MODEL_CHARS].encode("utf-8", "replace").decode("utf-8")


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
