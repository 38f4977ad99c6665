"""Errors the proxy itself answers with, in OpenAI's error JSON shape.

    ProxyError                 {"error": {"message", "type", "param", "code"}}
    ├── BadRequest             400 invalid_request_error (bad JSON, bad messages)
    ├── BodyTimeout            408 invalid_request_error / request_timeout
    ├── BodyTooLarge           413 invalid_request_error / request_too_large
    ├── ServerBusy             503 server_error / server_busy (retry-after: 1)
    ├── UpstreamUnreachable    502 upstream_error / upstream_unreachable
    ├── UpstreamBroken         502 upstream_error / upstream_broken (cut mid-body)
    └── UpstreamTimeout        504 upstream_error / upstream_timeout

A fault after the response has started (a stream cut mid-way) cannot become a status:
the relay raises ``StreamAborted`` so the server drops the connection without a clean
end, and the client's SDK raises.

On Anthropic routes (``/v1/messages*``, or any request with an ``anthropic-version``
header, which every Anthropic client sends) the same errors come in Anthropic's shape,
``{"type": "error", "error": {"type", "message"}}``, with Anthropic's type for the
status (502 ``api_error``, 504 ``timeout_error``, …), so its SDK raises its own class.

Upstream errors (4xx/5xx, 429 with retry-after) are never wrapped: their status,
headers and body pass through unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from starlette.responses import Response

ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                   403: "permission_error", 404: "not_found_error", 405: "invalid_request_error",
                   408: "timeout_error", 413: "request_too_large", 429: "rate_limit_error",
                   503: "overloaded_error", 504: "timeout_error",
                   529: "overloaded_error"}


def speaks_anthropic(path: str, headers: Mapping[str, str]) -> bool:
    """Whether a request is an Anthropic client's (its errors take Anthropic's shape)."""
    return path.startswith(("/v1/messages", "/messages")) or "anthropic-version" in headers


def anthropic_body(status: int, message: str) -> bytes:
    kind = ANTHROPIC_TYPES.get(status, "api_error")
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()


def error_json(status: int, message: str, kind: str, code: str | None, anthropic: bool,
               headers: Mapping[str, str] | None = None) -> Response:
    """An error of the proxy's own in OpenAI's shape, or Anthropic's when ``anthropic``."""
    body = anthropic_body(status, message) if anthropic else json.dumps(
        {"error": {"message": message, "type": kind, "param": None, "code": code}}).encode()
    return Response(body, status_code=status, media_type="application/json", headers=headers)


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


def error_response(exc: ProxyError, anthropic: bool = False) -> Response:
    body = anthropic_body(exc.status, exc.message) if anthropic else exc.body()
    return Response(body, status_code=exc.status, media_type="application/json")
