"""Requests the upstream will refuse: they carry no credential, and the upstream has
refused the last one that carried none (401 or 403). They are sent as they came, never
parsed, and the rules never start on them: a caller without a key could otherwise pin the
rule workers (and the event loop, through the GIL) with huge bodies that the upstream
rejects anyway. Before a keyless upstream (a local model server) nothing is
ever refused, so every request keeps its rules; a request with a key always does.

Credentials are looked for in what goes upstream, where the request's dialect says its
API carries them (``Dialect.has_credential``: a header, or Gemini's ``?key=``): a client
token the proxy checked and strips (``proxy.edge.exposure``) is not one.
"""

from __future__ import annotations

REFUSED = frozenset({401, 403})


class KeylessRefusals:
    """Whether this upstream has refused a request without a credential (one per app)."""

    def __init__(self) -> None:
        self.refused = False

    def skip(self, has_key: bool) -> bool:
        """Whether a request going upstream (with a key or not) should skip the rules."""
        return self.refused and not has_key

    def observe(self, has_key: bool, status: int) -> None:
        if not has_key:  # an upstream that took one after all: rules again
            self.refused = status in REFUSED
