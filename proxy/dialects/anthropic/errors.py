"""The proxy's own errors in Anthropic's shape, ``{"type": "error", "error": {"type",
"message"}}``, with Anthropic's type for the status (502 ``api_error``, 504
``timeout_error``, …), so its SDK raises its own class."""

from __future__ import annotations

import json

from context_engine.proxy.errors import ProxyError

TYPES = {400: "invalid_request_error", 401: "authentication_error",
         403: "permission_error", 404: "not_found_error", 405: "invalid_request_error",
         408: "timeout_error", 413: "request_too_large", 429: "rate_limit_error",
         503: "overloaded_error", 504: "timeout_error",
         529: "overloaded_error"}


def error_body(exc: ProxyError) -> bytes:
    kind = TYPES.get(exc.status, "api_error")
    return json.dumps({"type": "error", "error": {"type": kind, "message": exc.message}}).encode()
