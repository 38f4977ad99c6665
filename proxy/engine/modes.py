"""Modes: which arm a request is in.

- ``rewrite``: the rules run and the rewritten request goes upstream.
- ``shadow``: the original goes upstream untouched; the rules run after the response,
  off the request path, and the ledger records what they would have sent.
- ``ab``: a stable hash of the session id puts ``ab_share`` of the sessions in the
  ``rewrite`` arm and the rest in ``passthrough``; the report compares what the
  provider billed in each.

The ``X-Context-Engine-Mode`` header overrides the configured mode per request.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from context_engine.proxy.errors import BadRequest

HEADER = "x-context-engine-mode"
MODES = ("rewrite", "shadow", "ab")


def ab_bucket(session: str) -> float:
    """A number in [0, 1), the same for a session on every replica and every run."""
    return int(hashlib.sha256(session.encode()).hexdigest()[:13], 16) / float(1 << 52)


def resolve(headers: Mapping[str, str], configured: str) -> str:
    mode = headers.get(HEADER, "").strip().lower() or configured
    if mode not in MODES:
        raise BadRequest(f"{HEADER}: {mode!r} is not a mode; valid modes: {', '.join(MODES)}",
                         param=HEADER)
    return mode


def arm(mode: str, session: str, ab_share: float) -> str:
    """``rewrite``, ``shadow`` or ``passthrough``."""
    if mode == "ab":
        return "rewrite" if ab_bucket(session) < ab_share else "passthrough"
    return mode
