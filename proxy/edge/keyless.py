"""Requests the upstream will refuse: they carry no credential, and the upstream has
refused the last one that carried none from the same caller scope (401 or 403). They are
sent as they came, never parsed, and the rules never start on them: a caller without a
key could otherwise pin the rule workers (and the event loop, through the GIL) with huge
bodies that the upstream rejects anyway. Before a keyless upstream (a local model
server) nothing is ever refused, so every request keeps its rules; a request with a key
always does.

Credentials are looked for in what goes upstream, where the request's dialect says its
API carries them (``Dialect.has_credential``: a header, or Gemini's ``?key=``): a client
token the proxy checked and strips (``proxy.edge.exposure``) is not one. The decision is
kept per caller scope (``session.caller_hash``, which does cover the client token): one
client refused does not switch the rules off for another. At most ``MAX_SCOPES`` scopes
are remembered (least recently seen forgotten first), so a flood of made-up tokens costs
bounded memory and forgets, at worst, that some scope was refused.
"""

from __future__ import annotations

from collections import OrderedDict

REFUSED = frozenset({401, 403})
MAX_SCOPES = 10_000


class KeylessRefusals:
    """The caller scopes whose last request without a credential the upstream refused."""

    def __init__(self, max_scopes: int = MAX_SCOPES) -> None:
        self.max_scopes = max_scopes
        self._refused: OrderedDict[str, None] = OrderedDict()

    def skip(self, scope: str, has_key: bool) -> bool:
        """Whether a request of ``scope`` going upstream (with a key or not) should skip
        the rules."""
        if has_key or scope not in self._refused:
            return False
        self._refused.move_to_end(scope)
        return True

    def observe(self, scope: str, has_key: bool, status: int) -> None:
        if has_key:
            return
        if status not in REFUSED:  # an upstream that took one after all: rules again
            self._refused.pop(scope, None)
            return
        self._refused[scope] = None
        self._refused.move_to_end(scope)
        while len(self._refused) > self.max_scopes:
            self._refused.popitem(last=False)
