"""Requests the upstream will refuse: they carry no credential, and the upstream has
refused the last one that carried none (401 or 403). They are sent as they came, never
parsed, and the rules never start on them: a caller without a key could otherwise pin the
rule workers (and the event loop, through the GIL) with huge bodies that the upstream
rejects anyway. Before a keyless upstream (a local model server) nothing is
ever refused, so every request keeps its rules; a request with a key always does.

Credentials are looked for in what goes upstream: a client token the proxy checked and
strips (``proxy.edge.exposure``) is not one.
"""

from __future__ import annotations

from collections.abc import Iterable

CREDENTIALS = frozenset({b"authorization", b"x-api-key", b"api-key"})
REFUSED = frozenset({401, 403})


def has_credential(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    return any(k.lower() in CREDENTIALS and v.strip() for k, v in headers)


class KeylessRefusals:
    """Whether this upstream has refused a request without a credential (one per app)."""

    def __init__(self) -> None:
        self.refused = False

    def skip(self, headers: list[tuple[bytes, bytes]]) -> bool:
        """Whether a request going upstream with ``headers`` should skip the rules."""
        return self.refused and not has_credential(headers)

    def observe(self, headers: list[tuple[bytes, bytes]], status: int) -> None:
        if not has_credential(headers):  # an upstream that took one after all: rules again
            self.refused = status in REFUSED
