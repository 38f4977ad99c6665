"""How each agent is pointed at the proxy without touching its config files.

Every override is an environment variable or a command-line flag for this one run:

- ``claude`` (Claude Code): ``ANTHROPIC_BASE_URL`` without ``/v1`` (it appends
  ``/v1/messages`` itself), in the environment and in ``--settings`` (an ``env`` block in
  the user's ``settings.json`` would otherwise win over the environment). Behind a base URL that is not Anthropic's, Claude Code turns
  MCP tool search off and sends every MCP tool schema on every request;
  ``ENABLE_TOOL_SEARCH=true`` keeps the tools deferred (the proxy passes
  ``defer_loading`` and ``tool_reference`` blocks through unchanged). A value the user set
  wins.
- ``codex`` (Codex CLI): ``-c`` overrides that define a model provider of our own and
  select it; Codex ignores a changed ``base_url`` of its built-in ``openai`` provider.
- ``aider``: ``OPENAI_API_BASE`` (litellm's name) and ``OPENAI_BASE_URL``.
- ``opencode``: ``OPENCODE_CONFIG_CONTENT`` (an inline config opencode merges over its
  files; one the user set keeps its other keys) for the ``openai`` and ``anthropic``
  providers' ``baseURL``, plus the SDKs' variables.
- ``gemini`` (Gemini CLI): ``GOOGLE_GEMINI_BASE_URL`` without a version (its requests
  carry ``/v1beta/models/…``); its upstream is Google's API root.
- ``goose``: ``OPENAI_HOST`` with ``OPENAI_BASE_PATH``, and ``ANTHROPIC_HOST`` (goose
  appends ``v1/messages``).
- anything else (``run -- COMMAND``): ``OPENAI_BASE_URL``, ``OPENAI_API_BASE`` and
  ``ANTHROPIC_BASE_URL``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

OPENAI = "https://api.openai.com/v1"
ANTHROPIC = "https://api.anthropic.com/v1"
GEMINI = "https://generativelanguage.googleapis.com"  # no version: Gemini's paths carry it
CODEX_PROVIDER = "context_engine"


@dataclass(frozen=True)
class Agent:
    name: str
    upstream: str  # the agent's own provider: the upstream unless --upstream says otherwise
    install: str  # how to get it, for the "not installed" message


@dataclass(frozen=True)
class Launch:
    """The command to run and the variables to add to its environment."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


AGENTS = {
    "claude": Agent("claude", ANTHROPIC, "npm install -g @anthropic-ai/claude-code"),
    "codex": Agent("codex", OPENAI, "npm install -g @openai/codex"),
    "aider": Agent("aider", OPENAI, "python3 -m pip install aider-install && aider-install"),
    "opencode": Agent("opencode", OPENAI, "npm install -g opencode-ai"),
    "gemini": Agent("gemini", GEMINI, "npm install -g @google/gemini-cli"),
    "goose": Agent("goose", OPENAI, "see https://block.github.io/goose/docs/getting-started/installation"),
}


def generic_env(base: str) -> dict[str, str]:
    """The variables most OpenAI and Anthropic SDKs read for their base URL."""
    return {"OPENAI_BASE_URL": f"{base}/v1", "OPENAI_API_BASE": f"{base}/v1",
            "ANTHROPIC_BASE_URL": base}


def _quote(value: str) -> str:
    return json.dumps(value)  # a TOML basic string: JSON's escapes are TOML's


def opencode_config(given: str, base: str) -> str:
    """The user's inline opencode config (``OPENCODE_CONFIG_CONTENT``, if any) with the
    ``openai`` and ``anthropic`` providers' ``baseURL`` pointed at the proxy."""
    try:
        config = json.loads(given) if given.strip() else {}
    except ValueError:
        config = {}
    if not isinstance(config, dict):
        config = {}
    providers = config.setdefault("provider", {})
    if not isinstance(providers, dict):
        providers = config["provider"] = {}
    for name in ("openai", "anthropic"):
        entry = providers.setdefault(name, {})
        if not isinstance(entry, dict):
            entry = providers[name] = {}
        options = entry.setdefault("options", {})
        if not isinstance(options, dict):
            options = entry["options"] = {}
        options["baseURL"] = f"{base}/v1"
    return json.dumps(config)


def launch(agent: str, args: list[str], base: str,
           environ: dict[str, str] | None = None) -> Launch:
    """How to run ``agent`` with ``args`` so that it talks to the proxy at ``base``
    (``http://127.0.0.1:PORT/_tag/…``, no ``/v1``). ``environ``: the user's environment
    (a variable the user set for the same purpose is kept)."""
    environ = dict(os.environ) if environ is None else environ
    if agent == "claude":
        env = {"ANTHROPIC_BASE_URL": base}
        if "ENABLE_TOOL_SEARCH" not in environ:
            env["ENABLE_TOOL_SEARCH"] = "true"
        # settings.json's "env" beats the process's environment: --settings beats settings.json
        flag = json.dumps({"env": {"ANTHROPIC_BASE_URL": base}})
        return Launch(["claude", "--settings", flag, *args], env)
    if agent == "codex":
        p = f"model_providers.{CODEX_PROVIDER}"
        flags = [f"model_provider={_quote(CODEX_PROVIDER)}",
                 f"{p}.name={_quote('Context Engine')}",
                 f"{p}.base_url={_quote(base + '/v1')}",
                 f"{p}.wire_api={_quote('responses')}",
                 f"{p}.env_key={_quote('OPENAI_API_KEY')}"]
        return Launch(["codex", *[x for f in flags for x in ("-c", f)], *args])
    if agent == "aider":
        return Launch(["aider", *args], {"OPENAI_API_BASE": f"{base}/v1",
                                         "OPENAI_BASE_URL": f"{base}/v1"})
    if agent == "opencode":
        env = generic_env(base) | {"ANTHROPIC_BASE_URL": f"{base}/v1"}  # the AI SDK wants /v1
        env["OPENCODE_CONFIG_CONTENT"] = opencode_config(environ.get("OPENCODE_CONFIG_CONTENT", ""), base)
        return Launch(["opencode", *args], env)
    if agent == "gemini":
        return Launch(["gemini", *args], {"GOOGLE_GEMINI_BASE_URL": base})
    if agent == "goose":
        return Launch(["goose", *args], {"OPENAI_HOST": base, "OPENAI_BASE_PATH": "v1/chat/completions",
                                         "ANTHROPIC_HOST": base})
    raise KeyError(agent)
