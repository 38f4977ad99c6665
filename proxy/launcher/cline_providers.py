"""Cline's provider settings for one ``context-engine run cline``.

Cline (the CLI) reads its providers, each with its own ``baseUrl``, from one JSON file,
``providers.json`` in its data folder, and has no variable or flag for a base URL. It does
read the file from ``CLINE_PROVIDER_SETTINGS_PATH`` when that is set, so ``run`` hands it
a copy of the user's file for this run with the base URL of each provider that speaks
OpenAI's or Anthropic's API pointed at the proxy. The user's file is never written (Cline
writes its changes during the run to the copy, which ``run`` removes afterwards).

When the user's file names no such provider, the copy adds an ``openai-compatible`` one
(keyed with ``OPENAI_API_KEY`` when set). Cline's ``-P PROVIDER`` naming another provider
than the file's last used one makes Cline replace the whole file with a fresh entry for
it (no ``baseUrl``: the run would go direct), so the copy makes the named provider the
last used one, adding its entry if it speaks one of the two APIs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

OPENAI_LIKE = {"openai", "openai-native", "openai-compatible", "openai-responses", "openai-chat"}
ANTHROPIC_LIKE = {"anthropic", "anthropic-compatible"}
ADDED = "openai-compatible"


def cline_providers_path(environ: dict[str, str]) -> Path:
    """Where Cline reads the user's providers (as Cline resolves it)."""
    given = environ.get("CLINE_PROVIDER_SETTINGS_PATH", "").strip()
    if given:
        return Path(given)
    data = environ.get("CLINE_DATA_DIR", "").strip()
    if not data:
        root = environ.get("CLINE_DIR", "").strip() or str(Path(environ.get("HOME") or Path.home()) / ".cline")
        data = os.path.join(root, "data")
    return Path(data) / "settings" / "providers.json"


def read_text(path: Path) -> str:
    """The file's text, or "" when it is missing or unreadable."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def _dict(parent: dict[str, Any], key: str) -> dict[str, Any]:
    value = parent.get(key)
    if not isinstance(value, dict):
        value = parent[key] = {}
    return value


def json_object(text: str) -> dict[str, Any]:
    """``text`` as a JSON object: {} when it is empty, not JSON, or not an object (a
    config file the agent would not read either)."""
    try:
        config = json.loads(text) if text.strip() else {}
    except ValueError:
        return {}
    return config if isinstance(config, dict) else {}


def cline_providers(given: str, base: str, environ: dict[str, str] | None = None,
                    named: str | None = None) -> str:
    """The user's ``providers.json`` text (``given``; "" or unreadable: none) with every
    OpenAI- and Anthropic-API provider's ``baseUrl`` pointed at the proxy at ``base``
    (without ``/v1``: Cline's SDKs take the URL with it); ``named``: the provider the
    command line selects."""
    environ = dict(os.environ) if environ is None else environ
    config = json_object(given)
    config.setdefault("version", 1)
    providers = _dict(config, "providers")
    pointed = False
    for entry in providers.values():
        settings = entry.get("settings") if isinstance(entry, dict) else None
        if isinstance(settings, dict) and settings.get("provider") in OPENAI_LIKE | ANTHROPIC_LIKE:
            settings["baseUrl"] = f"{base}/v1"
            pointed = True
    added = named if named in OPENAI_LIKE | ANTHROPIC_LIKE and named not in providers else None
    if added or not (pointed or named):
        added = added or ADDED
        settings = {"provider": added, "baseUrl": f"{base}/v1"}
        if added in OPENAI_LIKE and environ.get("OPENAI_API_KEY"):
            settings["apiKey"] = environ["OPENAI_API_KEY"]
        providers[added] = {"settings": settings, "updatedAt": "1970-01-01T00:00:00.000Z",
                            "tokenSource": "manual"}
        config.setdefault("lastUsedProvider", added)
    if named:
        config["lastUsedProvider"] = named
    return json.dumps(config, indent=2)
