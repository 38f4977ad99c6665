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

from starlette.types import ASGIApp, Receive, Scope, Send

PREFIX = "/_tag/"
AGENT_HEADER = "x-context-engine-agent"
PROJECT_HEADER = "x-context-engine-project"
AGENT = re.compile(r"[A-Za-z0-9_.-]{1,40}")
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
    """ASGI middleware: ``/_tag/<agent>/<project>/rest`` → ``/rest`` plus the two headers."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(PREFIX):
            parts = scope["path"][len(PREFIX):].split("/", 2)
            project = decode_project(parts[1]) if len(parts) == 3 else None
            if project is not None and AGENT.fullmatch(parts[0]) and "\x00" not in project:
                rest = "/" + parts[2]
                raw = scope.get("raw_path")
                raw_rest = (b"/" + raw.split(b"/", 4)[4]) if isinstance(raw, bytes) \
                    and raw.count(b"/") >= 4 else rest.encode("latin-1", "replace")
                headers = [(k, v) for k, v in scope["headers"]
                           if k.lower() not in (AGENT_HEADER.encode(), PROJECT_HEADER.encode())]
                headers += [(AGENT_HEADER.encode(), parts[0].encode()),
                            (PROJECT_HEADER.encode(), project[:MAX_PROJECT].encode("utf-8"))]
                scope = {**scope, "path": rest, "raw_path": raw_rest, "headers": headers}
        await self.app(scope, receive, send)
