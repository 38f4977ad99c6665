"""The proxy's own errors in Google's shape, ``{"error": {"code", "message", "status"}}``
(the canonical status name for the HTTP status), so Google's SDKs raise their own class."""

from __future__ import annotations

import json

from context_engine.proxy.errors import ProxyError

STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
          404: "NOT_FOUND", 405: "INVALID_ARGUMENT", 408: "DEADLINE_EXCEEDED",
          409: "ABORTED", 413: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED",
          499: "CANCELLED", 500: "INTERNAL", 501: "UNIMPLEMENTED", 502: "UNAVAILABLE",
          503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}


def error_body(exc: ProxyError) -> bytes:
    status = STATUS.get(exc.status, "UNKNOWN")
    return json.dumps({"error": {"code": exc.status, "message": exc.message,
                                 "status": status}}).encode()
