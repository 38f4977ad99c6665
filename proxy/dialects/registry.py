"""The dialects the proxy speaks, in one visible list (``DIALECTS``).

Each serves its ``routes``; ``for_client`` picks the dialect whose errors a request on a
route every API shares (a 404, a passthrough, a refused host or token) gets: the first
that ``speaks`` it, else ``DEFAULT`` (OpenAI's shape). Adding an API is one dialect
package and one entry here.
"""

from __future__ import annotations

from collections.abc import Mapping

from context_engine.proxy.dialects.anthropic import ANTHROPIC
from context_engine.proxy.dialects.chat import CHAT
from context_engine.proxy.dialects.dialect import Dialect
from context_engine.proxy.dialects.gemini import GEMINI
from context_engine.proxy.dialects.interactions import INTERACTIONS
from context_engine.proxy.dialects.responses import RESPONSES

DIALECTS: tuple[Dialect, ...] = (CHAT, RESPONSES, ANTHROPIC, INTERACTIONS, GEMINI)
BY_NAME: dict[str, Dialect] = {d.name: d for d in DIALECTS}
NAMES: tuple[str, ...] = tuple(BY_NAME)
DEFAULT: Dialect = CHAT
NEUTRAL: Dialect = CHAT  # its requests are the neutral form itself: nothing to translate


def for_client(path: str, headers: Mapping[str, str]) -> Dialect:
    """The dialect whose error shape a request on a shared route gets."""
    return next((d for d in DIALECTS if d.speaks(path, headers)), DEFAULT)
