"""Continue CLI's (``cn``) configuration for one ``context-engine run cn``.

``cn`` takes each model's endpoint from its ``apiBase`` in a YAML config: the one named
by ``--config``, else ``config.yaml`` in its home (``$CONTINUE_GLOBAL_DIR``, else
``~/.continue``). It has no variable for a base URL, so ``run`` hands it a copy of that
config for this run (JSON, which YAML reads as is) with ``apiBase`` of every model whose
provider speaks OpenAI's or Anthropic's API pointed at the proxy, through ``--config``.
The user's file is never written. With no config at all, ``cn -p`` would write
``config.yaml`` itself from ``ANTHROPIC_API_KEY`` (Claude Sonnet 4.6): the copy holds
that model instead, pointed at the proxy. A hub slug (``--config owner/name``) and a
model block taken from the hub (``uses:``) keep their own endpoints: not handled.

``--config`` must carry the copy's path, which ``run`` only knows once it has written the
file: the command is ``sh -c 'exec cn --config "$VAR" "$@"'``, the variable naming it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

OPENAI_LIKE = {"openai", "azure-openai"}
ANTHROPIC_LIKE = {"anthropic"}
VARIABLE = "CONTEXT_ENGINE_CN_CONFIG"
WRAPPER = f'exec cn --config "${VARIABLE}" "$@"'
# what cn -p writes to config.yaml from ANTHROPIC_API_KEY when there is none
CN_DEFAULT = {"name": "Claude Sonnet 4.6", "provider": "anthropic", "model": "claude-sonnet-4-6",
              "roles": ["chat", "edit", "apply"],
              "defaultCompletionOptions": {"contextLength": 200000, "maxTokens": 64000},
              "capabilities": ["tool_use", "image_input"]}


def split_config(args: list[str]) -> tuple[str | None, list[str]]:
    """The ``--config`` value in ``cn``'s arguments (the last one) and the rest."""
    given, rest, i = None, [], 0
    while i < len(args):
        arg = args[i]
        if arg == "--config" and i + 1 < len(args):
            given, i = args[i + 1], i + 2
            continue
        if arg.startswith("--config="):
            given = arg.partition("=")[2]
        else:
            rest.append(arg)
        i += 1
    return given, rest


def is_file(config: str) -> bool:
    """As ``cn`` tells a file path from a hub slug."""
    return config.startswith((".", "/", "~", "\\\\")) or any(
        ext in config for ext in (".yaml", ".yml", ".json")) or (len(config) > 2 and config[1] == ":")


def config_path(given: str | None, environ: dict[str, str], cwd: str) -> Path:
    """The config file ``cn`` would read for this run."""
    if given:
        return Path(cwd) / os.path.expanduser(given)
    home = environ.get("CONTINUE_GLOBAL_DIR", "").strip() or str(
        Path(environ.get("HOME") or Path.home()) / ".continue")
    return Path(home) / "config.yaml"


def _load(path: Path) -> dict[str, Any] | None:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return data if isinstance(data, dict) else None


def pointed(config: dict[str, Any], base: str) -> dict[str, Any]:
    """``config`` with the OpenAI and Anthropic models' ``apiBase`` set to the proxy."""
    models = config.get("models")
    for model in models if isinstance(models, list) else []:
        if isinstance(model, dict) and model.get("provider") in OPENAI_LIKE | ANTHROPIC_LIKE:
            model["apiBase"] = f"{base}/v1/"  # cn appends chat/completions, messages, …
    return config


def continue_config(args: list[str], base: str, environ: dict[str, str],
                    cwd: str) -> tuple[list[str], dict[str, str]]:
    """(argv, one-run files) for ``cn`` with ``args``: the wrapper and the copy, or ``cn``
    as given when there is nothing to copy (a hub slug, a config that does not parse, no
    config and no Anthropic key)."""
    given, rest = split_config(args)
    unchanged: tuple[list[str], dict[str, str]] = (["cn", *args], {})
    if given is not None and not is_file(given):
        return unchanged
    config = _load(config_path(given, environ, cwd))
    if config is None:
        return unchanged
    if not config:
        key = environ.get("ANTHROPIC_API_KEY")
        if given or not key:
            return unchanged
        config = {"name": "Local Config", "version": "1.0.0", "schema": "v1",
                  "models": [{**CN_DEFAULT, "apiKey": key}]}
    return ["sh", "-c", WRAPPER, "cn", *rest], {VARIABLE: json.dumps(pointed(config, base))}


def continue_speaks_anthropic(args: list[str], environ: dict[str, str], cwd: str) -> bool:
    """Whether the config's first chat model is an Anthropic one (``cn``'s default model)."""
    given, _ = split_config(args)
    if given is not None and not is_file(given):
        return False
    config = _load(config_path(given, environ, cwd))
    if config == {} and not given and environ.get("ANTHROPIC_API_KEY"):
        return True
    models = (config or {}).get("models")
    for model in models if isinstance(models, list) else []:
        if isinstance(model, dict) and "chat" in (model.get("roles") or ["chat"]):
            return model.get("provider") in ANTHROPIC_LIKE
    return False
