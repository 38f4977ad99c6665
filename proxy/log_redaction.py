"""Keys never in logs: every log record, from any logger (ours, httpx's, uvicorn's, any
library's), is redacted as it is made.

A Gemini key travels in the query (``?key=AIza…``), and httpx's own INFO line writes the
full URL of every request it sends (``HTTP Request: POST https://…?key=…``); a traceback
or a library's debug line can hold a header. So the redaction is not left to each call
site: ``install`` wraps the process's log-record factory, and each record's message, its
arguments and its traceback text are redacted before any handler, filter or formatter
sees them. What goes:

- the query string of every URL or path (``/v1beta/models/m:generateContent?[redacted]``);
- the value after a credential header's name (``authorization``, ``x-api-key``,
  ``x-goog-api-key``, ``api-key``, ``x-context-engine-token``, cookies, in any quoting);
- ``Bearer``/``Basic`` credentials, and strings shaped like provider keys (``AIza…``,
  ``sk-…``) wherever they stand.

Linear in the record's text: one pass of non-backtracking patterns per rule. Numbers
stay numbers (a ``%d`` still formats). The factory is the process's, so installing it
twice keeps one wrapper.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

REDACTED = "[redacted]"
# a URL or path with a query: a run of non-space characters holding a '/' before its '?'
_TOKEN = re.compile(r"[^\s\"'<>]+")
_HEADER = re.compile(
    r"(?i)\b(authorization|proxy-authorization|x-api-key|api-key|x-goog-api-key"
    r"|x-context-engine-token|x-context-engine-admin-token|cookie|set-cookie)"
    r"(['\"]?\s*[:=,]\s*b?['\"]?)[^'\"\r\n,}\]]*")
_SCHEME = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+")
_SHAPED = re.compile(r"\b(?:AIza[0-9A-Za-z_-]{20,}|sk-[A-Za-z0-9_-]{16,})")
_MARK = "_context_engine_redacting"


def _query(match: re.Match[str]) -> str:
    token = match.group(0)
    mark = token.find("?")
    if mark > 0 and "/" in token[:mark]:
        return token[:mark + 1] + REDACTED
    return token


def redact(text: str) -> str:
    """``text`` without query strings, credential header values or key-shaped strings."""
    if "?" in text:
        text = _TOKEN.sub(_query, text)
    text = _HEADER.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)
    text = _SCHEME.sub(lambda m: m.group(1) + " " + REDACTED, text)
    return _SHAPED.sub(REDACTED, text)


def _arg(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float)):
        return value
    text = str(value)
    clean = redact(text)
    return value if clean == text else clean


def redact_record(record: logging.LogRecord) -> logging.LogRecord:
    """``record`` with its message, arguments and traceback text redacted (in place)."""
    if isinstance(record.msg, str):
        record.msg = redact(record.msg)
    elif record.msg is not None:
        record.msg = redact(str(record.msg))
    if isinstance(record.args, Mapping):
        record.args = {k: _arg(v) for k, v in record.args.items()}
    elif isinstance(record.args, tuple):
        record.args = tuple(_arg(a) for a in record.args)
    if record.exc_info and record.exc_info[0] is not None:
        record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
    if record.stack_info:
        record.stack_info = redact(record.stack_info)
    return record


def install() -> None:
    """Redact every log record this process makes from now on (idempotent)."""
    current = logging.getLogRecordFactory()
    if getattr(current, _MARK, False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        return redact_record(current(*args, **kwargs))

    setattr(factory, _MARK, True)
    logging.setLogRecordFactory(factory)
