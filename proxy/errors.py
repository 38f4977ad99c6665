"""Errors the proxy itself answers with, in OpenAI's error JSON shape.

    ProxyError                 {"error": {"message", "type", "param", "code"}}
    ├── BadRequest             400 invalid_request_error (bad JSON, bad messages)
    ├── BodyTooLarge           413 invalid_request_error / request_too_large
    ├── UpstreamUnreachable    502 upstream_error / upstream_unreachable
    ├── UpstreamBroken         502 upstream_error / upstream_broken (cut mid-body)
    └── UpstreamTimeout        504 upstream_error / upstream_timeout

A fault after the response has started (a stream cut mid-way) cannot become a status:
the relay raises ``StreamAborted`` so the server drops the connection without a clean
end, and the client's SDK raises.

Upstream errors (4xx/5xx, 429 with retry-after) are never wrapped: their status,
headers and body pass through unchanged.
"""

from __future__ import annotations

import json

from starlette.responses import Response


class ProxyError(Exception):
    status = 500
    type = "server_error"
    code: str | None = None

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param

    def body(self) -> bytes:
        return json.dumps({"error": {"message": self.message, "type": self.type,
                                     "param": self.param, "code": self.code}}).encode()


class BadRequest(ProxyError):
    status = 400
    type = "invalid_request_error"
    code = "invalid_request"


class BodyTooLarge(ProxyError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class UpstreamUnreachable(ProxyError):
    status = 502
    type = "upstream_error"
    code = "upstream_unreachable"


class UpstreamTimeout(ProxyError):
    status = 504
    type = "upstream_error"
    code = "upstream_timeout"


class UpstreamBroken(ProxyError):
    status = 502
    type = "upstream_error"
    code = "upstream_broken"


class StreamAborted(Exception):
    """Raised to the ASGI server after an upstream fault mid-response: it aborts the
    connection instead of ending the body cleanly."""


def error_response(exc: ProxyError) -> Response:
    return Response(exc.body(), status_code=exc.status, media_type="application/json")
