"""The launcher-only endpoints: how ``context-engine run`` tells its own proxy from an impostor.

``context-engine run`` starts the background proxy with a random per-launch secret in
the environment variable ``CONTEXT_ENGINE_LAUNCH_SECRET`` (never on the command line,
which every local user can read); ``serve`` takes it out of ``os.environ`` at start-up
(``take_secret``) and, when there is one, adds two routes:

- ``POST /_launcher/identity`` ``{"nonce": N}`` → ``{"pid": P, "proof":
  HMAC-SHA256(secret, "identity:N:P")}``: the launcher checks the proof before it reuses
  the proxy, reads its ``/stats`` or stops it. The secret itself is never sent.
- ``POST /_launcher/stop`` ``{"nonce": N, "proof": HMAC-SHA256(secret, "stop:N:P")}`` →
  202, then the process sends itself SIGTERM (the graceful shutdown: the ledger is
  flushed). Only the secret's holder can make the proof, so no other local user or web
  page can stop the proxy, and ``stop`` need not signal a pid it cannot verify.

The purpose word in each proof keeps an identity answer from serving as a stop request.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import signal
from collections.abc import MutableMapping

from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

SECRET_ENV = "CONTEXT_ENGINE_LAUNCH_SECRET"
IDENTITY_PATH = "/_launcher/identity"
STOP_PATH = "/_launcher/stop"
MIN_NONCE, MAX_NONCE = 16, 256


def take_secret(environ: MutableMapping[str, str] | None = None) -> str:
    """The launch secret, removed from the environment (no child process inherits it)."""
    env = os.environ if environ is None else environ
    return env.pop(SECRET_ENV, "")


def proof(secret: str, purpose: str, nonce: str, pid: int) -> str:
    """HMAC-SHA256 of ``purpose:nonce:pid`` under ``secret``, hex."""
    message = f"{purpose}:{nonce}:{pid}".encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def _error(status: int, message: str, code: str) -> Response:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": None,
                      "code": code}}
    return JSONResponse(body, status_code=status)


async def _nonce(request: Request) -> tuple[dict[str, object], str] | Response:
    try:
        body = json.loads(await request.body())
    except ValueError:
        return _error(400, "The body must be JSON: {\"nonce\": \"...\"}.", "invalid_json")
    nonce = body.get("nonce") if isinstance(body, dict) else None
    if not isinstance(nonce, str) or not MIN_NONCE <= len(nonce) <= MAX_NONCE:
        return _error(400, f"nonce: a string of {MIN_NONCE} to {MAX_NONCE} characters.",
                      "invalid_nonce")
    return body, nonce


def launcher_routes(secret: str) -> list[Route]:
    """The two routes, answering for ``secret``; none when there is no secret."""
    if not secret:
        return []
    pid = os.getpid()

    async def identity(request: Request) -> Response:
        got = await _nonce(request)
        if isinstance(got, Response):
            return got
        return JSONResponse({"pid": pid, "proof": proof(secret, "identity", got[1], pid)})

    async def stop(request: Request) -> Response:
        got = await _nonce(request)
        if isinstance(got, Response):
            return got
        body, nonce = got
        given = body.get("proof")
        if not isinstance(given, str) or not hmac.compare_digest(
                given.encode(), proof(secret, "stop", nonce, pid).encode()):
            return _error(403, "This proxy stops only for the launcher that started it.",
                          "invalid_launcher_proof")
        return JSONResponse({"stopping": pid}, status_code=202,
                            background=BackgroundTask(os.kill, pid, signal.SIGTERM))

    return [Route(IDENTITY_PATH, identity, methods=["POST"]),
            Route(STOP_PATH, stop, methods=["POST"])]
