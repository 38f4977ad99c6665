"""Who sent a request: the agent and the project folder, for ``report --by agent|project``.

A client names them with two headers, ``X-Context-Engine-Agent`` and
``X-Context-Engine-Project`` (the proxy's own: never forwarded upstream). An agent that
cannot add headers gets a base URL with a tag prefix instead (``context-engine run``):

    http://127.0.0.1:8787/_tag/<agent>/<project, base64url>/v1/messages

``TagPrefix`` turns the prefix into those two headers and routes the rest of the path as
usual, so the upstream sees ``/v1/messages``. A malformed prefix answers 404 like any
unknown path.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from urllib.parse import unquote

from starlette.types import ASGIApp, Receive, Scope, Send

PREFIX = "/_tag/"
AGENT_HEADER = "x-context-engine-agent"
PROJECT_HEADER = "x-context-engine-project"
AGENT = re.compile(r"[A-Za-z0-9_.-]{1,40}")
PROJECT_SEGMENT = re.compile(r"[A-Za-z0-9_-]{1,1400}")  # base64url of up to 1,024 bytes
MAX_AGENT, MAX_PROJECT = 40, 1024


def encode_project(folder: str) -> str:
    """The project folder as one URL path segment."""
    return base64.urlsafe_b64encode(folder.encode("utf-8", "surrogateescape")).decode().rstrip("=")


def decode_project(segment: str) -> str | None:
    try:
        raw = base64.b64decode(segment + "=" * (-len(segment) % 4), altchars=b"-_", validate=True)
        return raw.decode("utf-8")
    except (binascii.Error, ValueError):
        return None


def tag_prefix(agent: str, folder: str) -> str:
    """The path prefix that tags every request under it with ``agent`` and ``folder``."""
    return f"{PREFIX}{agent}/{encode_project(folder)}"


def tags(headers: Mapping[str, str]) -> tuple[str, str]:
    """(agent, project) from a request's headers (UTF-8 bytes, which ASGI hands over as
    latin-1), clipped to the ledger's sizes."""
    agent, project = headers.get(AGENT_HEADER, ""), headers.get(PROJECT_HEADER, "")
    project = project.encode("latin-1", "replace").decode("utf-8", "replace")
    return agent[:MAX_AGENT], project[:MAX_PROJECT]


class TagPrefix:
    """ASGI middleware: ``/_tag/<agent>/<project>/rest`` → ``/rest`` plus the two headers.

    The prefix is read once, from the raw path as the client sent it: the agent and the
    project segments must be plain (no percent-encoding: ``AGENT`` and base64url), and the
    routed path is the raw rest decoded the way the server decodes any path, so the route
    that handles a request and the upstream URL built from its raw path always agree (an
    encoded ``/`` cannot move a conversation call onto a passthrough route). Anything else
    under ``/_tag/`` is left as it came and answers 404.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and scope["path"].startswith(PREFIX):
            scope = _untagged(scope) or {**scope, "path": "/_tag/invalid"}
        await self.app(scope, receive, send)


def _untagged(scope: Scope) -> Scope | None:
    """``scope`` with the prefix taken off and turned into headers; None if it is malformed."""
    raw = scope.get("raw_path")
    if not isinstance(raw, bytes):
        raw = scope["path"].encode("utf-8", "surrogateescape")
    parts = raw.split(b"/", 4)
    if len(parts) < 5 or parts[1] != PREFIX.strip("/").encode():
        return None
    agent, segment, rest = (p.decode("latin-1") for p in parts[2:5])
    project = decode_project(segment) if PROJECT_SEGMENT.fullmatch(segment) else None
    if project is None or not AGENT.fullmatch(agent) or "\x00" in project:
        return None
    raw_rest = b"/" + parts[4]
    headers = [(k, v) for k, v in scope["headers"]
               if k.lower() not in (AGENT_HEADER.encode(), PROJECT_HEADER.encode())]
    headers += [(AGENT_HEADER.encode(), agent.encode()),
                (PROJECT_HEADER.encode(), project[:MAX_PROJECT].encode("utf-8"))]
    path = unquote(raw_rest.decode("latin-1"))  # as uvicorn decodes a path
    return {**scope, "path": path, "raw_path": raw_rest, "headers": headers}
