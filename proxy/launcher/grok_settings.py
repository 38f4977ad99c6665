"""Grok CLI's (``grok``, @vibe-kit/grok-cli) own provider, for ``context-engine run grok``.

Grok CLI calls the OpenAI Chat Completions API at ``GROK_BASE_URL``, else the
``baseURL`` of ``~/.grok/user-settings.json``, else xAI's. ``run`` sets the variable for
the run (the settings file is never written; Grok CLI's own ``--base-url`` flag would
save its value there, so ``run`` does not use it); the provider the user had chosen is
the proxy's default upstream.
"""

from __future__ import annotations

import json
from pathlib import Path

XAI = "https://api.x.ai/v1"


def grok_upstream(environ: dict[str, str]) -> str:
    """The base URL Grok CLI would call itself."""
    given = environ.get("GROK_BASE_URL", "").strip()
    if given:
        return given
    path = Path(environ.get("HOME") or Path.home()) / ".grok" / "user-settings.json"
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return XAI
    url = saved.get("baseURL") if isinstance(saved, dict) else None
    return url.strip() if isinstance(url, str) and url.strip().startswith(("http://", "https://")) else XAI
