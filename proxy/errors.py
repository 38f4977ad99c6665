"""Errors the proxy itself answers with, in OpenAI's error JSON shape.

    ProxyError                 {"error": {"message", "type", "param", "code"}}
    ├── BadRequest             400 invalid_request_error (bad JSON, bad messages)
    ├── BodyTimeout            408 invalid_request_error / request_timeout
    ├── BodyTooLarge           413 invalid_request_error / request_too_large
    ├── ServerBusy             503 server_error / server_busy (retry-after: 1)
    ├── UpstreamUnreachable    502 upstream_error / upstream_unreachable
    ├── UpstreamBroken         502 upstream_error / upstream_broken (cut mid-body)
    ├── UpstreamTimeout        504 upstream_error / upstream_timeout
    └── OwnError               any status: the proxy's routes (404, 405, a bad host or token)

A fault after the response has started (a stream cut mid-way) cannot become a status:
the relay raises ``StreamAborted`` so the server drops the connection without a clean
end, and the client's SDK raises.

Each API's client gets them in its API's shape: the dialect's ``error_body``
(``proxy.dialects``; Anthropic's ``{"type": "error", ...}``, Google's ``{"error":
{"code", "message", "status"}}``), so its SDK raises its own class. ``body()`` is
OpenAI's shape, the default.

Upstream errors (4xx/5xx, 429 with retry-after) are never wrapped: their status,
headers and body pass through unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

from starlette.responses import Response

ErrorBody = Callable[["ProxyError"], bytes]  # an error in one API's shape


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


class OwnError(ProxyError):
    """An error of the proxy's own routes, with its status, type and code given."""

    def __init__(self, status: int, message: str, kind: str, code: str | None) -> None:
        super().__init__(message)
        self.status, self.type, self.code = status, kind, code


class BadRequest(ProxyError):
    status = 400
    type = "invalid_request_error"
    code = "invalid_request"


class BodyTooLarge(ProxyError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class BodyTimeout(ProxyError):
    status = 408
    type = "invalid_request_error"
    code = "request_timeout"


class ServerBusy(ProxyError):
    status = 503
    type = "server_error"
    code = "server_busy"


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


def openai_body(exc: ProxyError) -> bytes:
    return exc.body()


def error_response(exc: ProxyError, shape: ErrorBody = openai_body,
                   headers: Mapping[str, str] | None = None) -> Response:
    """``exc`` as a response, its body in ``shape`` (a dialect's ``error_body``)."""
    return Response(shape(exc), status_code=exc.status, media_type="application/json",
                    headers=headers)
