"""Qwen Code's ``modelProviders`` for one ``context-engine run qwen``.

Qwen Code takes a model's base URL from a ``modelProviders`` entry in its settings before
``--openai-base-url`` and the environment, so a user who lists their models there would
bypass the proxy. ``modelProviders`` is replaced, not merged, across its settings scopes
(system over workspace over user over system defaults): the highest scope that has it
wins. ``run`` hands Qwen Code, through ``QWEN_CODE_SYSTEM_SETTINGS_PATH``, a system
settings file for this run: the real system settings with that winning
``modelProviders`` copied in, each ``openai`` and ``anthropic`` entry's ``baseUrl``
pointed at the proxy. ``QWEN_CODE_SYSTEM_DEFAULTS_PATH`` keeps the system defaults where
they were (Qwen Code looks for them beside the system settings). No file changes.

A settings file that is not plain JSON (Qwen Code allows comments) stops this: no
system file is handed over, and such a ``modelProviders`` entry's ``baseUrl`` wins.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

URLS = {"openai": "/v1", "anthropic": ""}  # authType → what follows the proxy's base


def system_settings_path(environ: dict[str, str]) -> Path:
    """Where Qwen Code reads its system settings (as it resolves it)."""
    if environ.get("QWEN_CODE_SYSTEM_SETTINGS_PATH"):
        return Path(environ["QWEN_CODE_SYSTEM_SETTINGS_PATH"])
    if sys.platform == "darwin":
        return Path("/Library/Application Support/QwenCode/settings.json")
    if sys.platform == "win32":
        return Path("C:\\ProgramData\\qwen-code\\settings.json")
    return Path("/etc/qwen-code/settings.json")


def system_defaults_path(environ: dict[str, str]) -> Path:
    if environ.get("QWEN_CODE_SYSTEM_DEFAULTS_PATH"):
        return Path(environ["QWEN_CODE_SYSTEM_DEFAULTS_PATH"])
    return system_settings_path(environ).parent / "system-defaults.json"


def user_settings_path(environ: dict[str, str]) -> Path:
    home = environ.get("QWEN_HOME") or str(Path(environ.get("HOME") or Path.home()) / ".qwen")
    return Path(home) / "settings.json"


def _read(path: Path) -> dict[str, Any] | None:
    """The settings in ``path``: {} when there is no file, None when it is not plain JSON."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError):
        return None
    try:
        data = json.loads(text) if text.strip() else {}
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def pointed(providers: dict[str, Any], base: str) -> dict[str, Any]:
    """``modelProviders`` with each ``openai``/``anthropic`` model's ``baseUrl`` at ``base``."""
    out = dict(providers)
    for auth, suffix in URLS.items():
        models = providers.get(auth)
        if isinstance(models, list):
            out[auth] = [{**m, "baseUrl": base + suffix} if isinstance(m, dict) else m for m in models]
    return out


def qwen_overrides(environ: dict[str, str], cwd: str, base: str) -> tuple[dict[str, str], dict[str, str]]:
    """(variables, one-run files) that point the user's ``modelProviders`` at the proxy;
    both empty when no settings scope lists any (or one cannot be read as JSON)."""
    system = _read(system_settings_path(environ))
    scopes = [system, _read(Path(cwd) / ".qwen" / "settings.json"),
              _read(user_settings_path(environ)), _read(system_defaults_path(environ))]
    for scope in scopes:
        if scope is None:
            return {}, {}
        providers = scope.get("modelProviders")
        if isinstance(providers, dict):
            break
    else:
        return {}, {}
    env = {"QWEN_CODE_SYSTEM_DEFAULTS_PATH": str(system_defaults_path(environ))}
    text = json.dumps((system or {}) | {"modelProviders": pointed(providers, base)}, indent=2)
    return env, {"QWEN_CODE_SYSTEM_SETTINGS_PATH": text}
