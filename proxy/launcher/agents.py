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
  The provider ``supports_websockets``, as OpenAI's own does: Codex keeps its Responses
  WebSocket (``proxy.edge.websocket``), and falls back to HTTP by itself when the
  upstream refuses one.
- ``aider``: ``OPENAI_API_BASE`` (litellm's name) and ``OPENAI_BASE_URL``.
- ``opencode``: ``OPENCODE_CONFIG_CONTENT`` (an inline config opencode merges over its
  files; one the user set keeps its other keys) for the ``openai`` and ``anthropic``
  providers' ``baseURL``, plus the SDKs' variables.
- ``gemini`` (Gemini CLI): ``GOOGLE_GEMINI_BASE_URL`` without a version (its requests
  carry ``/v1beta/models/…``); its upstream is Google's API root.
- ``goose``: ``OPENAI_HOST`` with ``OPENAI_BASE_PATH``, and ``ANTHROPIC_HOST`` (goose
  appends ``v1/messages``).
- ``copilot`` (GitHub Copilot CLI): its bring-your-own-key provider,
  ``COPILOT_PROVIDER_BASE_URL`` (``/v1`` for the ``openai`` type, none for ``anthropic``,
  as ``COPILOT_PROVIDER_TYPE`` says), keyed with ``OPENAI_API_KEY``/``ANTHROPIC_API_KEY``
  when no ``COPILOT_PROVIDER_*`` credential is set. With such a provider Copilot needs no
  GitHub login; GitHub's model routing (``--model auto``) is not available through it.
- ``qwen`` (Qwen Code): ``--auth-type openai`` unless the arguments name one (a saved
  Qwen OAuth choice would bypass the proxy), ``OPENAI_BASE_URL`` and ``ANTHROPIC_BASE_URL``
  (environment beats ``security.auth.baseUrl``), and the settings' ``modelProviders``
  (which beat both) pointed at the proxy in a system settings file for the run
  (``qwen_settings``). Qwen Code picks its request flavour by the base URL's host:
  behind the proxy a DashScope or OpenRouter upstream gets the generic OpenAI one
  (DashScope's ``X-DashScope-CacheControl`` header and ``cache_control`` marks are not
  sent). Not handled: it would take the proxy's URL to name the upstream's host.
- ``crush`` (Charm's Crush): ``OPENAI_API_ENDPOINT`` and ``ANTHROPIC_API_ENDPOINT`` (its
  bundled providers' endpoints; also as ``CRUSH_…``, which Crush prefers), and
  ``CRUSH_CLIENT_SERVER=0``: a detached Crush server started earlier would run the
  session with its own environment. A ``base_url`` in the user's ``crush.json`` wins.
- ``cline`` (Cline CLI): ``CLINE_PROVIDER_SETTINGS_PATH``, a copy for this run of the
  user's ``providers.json`` (``cline_providers``) with the OpenAI and Anthropic entries'
  ``baseUrl`` pointed at the proxy, and ``CLINE_SESSION_BACKEND_MODE=local``: Cline
  otherwise starts a hub daemon that outlives the run and serves later sessions with the
  environment it started with.
- ``grok`` (Grok CLI, @vibe-kit/grok-cli): ``GROK_BASE_URL`` (``grok_settings``); its
  upstream is the provider it would call itself (the variable, its settings' ``baseURL``,
  else xAI's).
- ``cn`` (Continue CLI): ``--config``, a copy for this run of the user's config with its
  OpenAI and Anthropic models' ``apiBase`` pointed at the proxy (``continue_config``).
- anything else (``run -- COMMAND``): ``OPENAI_BASE_URL``, ``OPENAI_API_BASE`` and
  ``ANTHROPIC_BASE_URL``.

Letta Code has no ``run``: its base URL (``LETTA_BASE_URL``) is a Letta server's, which
calls the model itself, and its local backend takes fixed endpoints from a model catalog.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from context_engine.proxy.launcher.cline_providers import (
    ANTHROPIC_LIKE,
    cline_providers,
    cline_providers_path,
    json_object,
    read_text,
)
from context_engine.proxy.launcher.continue_config import continue_config, continue_speaks_anthropic
from context_engine.proxy.launcher.grok_settings import XAI, grok_upstream
from context_engine.proxy.launcher.qwen_settings import qwen_overrides

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
    # variable → text of a file ``run`` writes for this run only (a private temporary
    # folder, removed after it) and names in that variable
    files: dict[str, str] = field(default_factory=dict)


AGENTS = {
    "claude": Agent("claude", ANTHROPIC, "npm install -g @anthropic-ai/claude-code"),
    "codex": Agent("codex", OPENAI, "npm install -g @openai/codex"),
    "aider": Agent("aider", OPENAI, "python3 -m pip install aider-install && aider-install"),
    "opencode": Agent("opencode", OPENAI, "npm install -g opencode-ai"),
    "gemini": Agent("gemini", GEMINI, "npm install -g @google/gemini-cli"),
    "goose": Agent("goose", OPENAI, "see https://block.github.io/goose/docs/getting-started/installation"),
    "copilot": Agent("copilot", OPENAI, "npm install -g @github/copilot"),
    "qwen": Agent("qwen", OPENAI, "npm install -g @qwen-code/qwen-code"),
    "crush": Agent("crush", OPENAI, "npm install -g @charmland/crush"),
    "cline": Agent("cline", OPENAI, "npm install -g cline"),
    "grok": Agent("grok", XAI, "npm install -g @vibe-kit/grok-cli"),
    "cn": Agent("cn", OPENAI, "npm install -g @continuedev/cli"),
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
    config = json_object(given)
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


def flag_value(args: list[str], *names: str) -> str | None:
    """The value of the first of the flags ``names`` in ``args`` (``-f V``, ``--flag=V``)."""
    for i, arg in enumerate(args):
        if arg in names and i + 1 < len(args):
            return args[i + 1]
        name, eq, value = arg.partition("=")
        if eq and name in names:
            return value
    return None


def own_upstream(agent: str, args: list[str], environ: dict[str, str]) -> str:
    """The provider the agent would call itself for this run: Anthropic's when its
    arguments or variables choose the Anthropic API (Copilot CLI's provider type, Qwen
    Code's ``--auth-type``, Cline's ``-P``, Continue's first chat model), Grok CLI's own
    base URL, else its default."""
    if agent == "copilot" and environ.get("COPILOT_PROVIDER_TYPE", "").strip().lower() == "anthropic":
        return ANTHROPIC
    if agent == "qwen" and flag_value(args, "--auth-type") == "anthropic":
        return ANTHROPIC
    if agent == "cline" and flag_value(args, "-P", "--provider") in ANTHROPIC_LIKE:
        return ANTHROPIC
    if agent == "grok":
        return grok_upstream(environ)
    if agent == "cn" and continue_speaks_anthropic(args, environ, os.getcwd()):
        return ANTHROPIC
    return AGENTS[agent].upstream


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
                 f"{p}.env_key={_quote('OPENAI_API_KEY')}",
                 f"{p}.supports_websockets=true"]  # its own transport: the proxy speaks it
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
    if agent == "grok":
        return Launch(["grok", *args], {"GROK_BASE_URL": f"{base}/v1"})
    if agent == "cn":
        argv, files = continue_config(args, base, environ, os.getcwd())
        return Launch(argv, {}, files)
    if agent in ("copilot", "qwen", "crush", "cline"):
        return _more(agent, args, base, environ)
    raise KeyError(agent)


def _more(agent: str, args: list[str], base: str, environ: dict[str, str]) -> Launch:
    """The agents that take a provider of the user's own (see the module docstring)."""
    if agent == "copilot":
        kind = environ.get("COPILOT_PROVIDER_TYPE", "openai").strip().lower()
        env = {"COPILOT_PROVIDER_BASE_URL": base if kind == "anthropic" else f"{base}/v1"}
        keyed = ("COPILOT_PROVIDER_API_KEY", "COPILOT_PROVIDER_BEARER_TOKEN",
                 "COPILOT_PROVIDER_API_KEY_COMMAND")
        key = environ.get("ANTHROPIC_API_KEY" if kind == "anthropic" else "OPENAI_API_KEY")
        if key and not any(environ.get(k) for k in keyed):
            env["COPILOT_PROVIDER_API_KEY"] = key
        return Launch(["copilot", *args], env)
    if agent == "qwen":
        named = any(a == "--auth-type" or a.startswith("--auth-type=") for a in args)
        env, files = qwen_overrides(environ, os.getcwd(), base)
        return Launch(["qwen", *([] if named else ["--auth-type", "openai"]), *args],
                      {"OPENAI_BASE_URL": f"{base}/v1", "ANTHROPIC_BASE_URL": base} | env, files)
    if agent == "crush":
        env = {"OPENAI_API_ENDPOINT": f"{base}/v1", "ANTHROPIC_API_ENDPOINT": base}
        return Launch(["crush", *args], env | {f"CRUSH_{k}": v for k, v in env.items()}
                      | {"CRUSH_CLIENT_SERVER": "0"})
    env = {} if "CLINE_SESSION_BACKEND_MODE" in environ else {"CLINE_SESSION_BACKEND_MODE": "local"}
    return Launch(["cline", *args], env, {"CLINE_PROVIDER_SETTINGS_PATH": cline_providers(
        read_text(cline_providers_path(environ)), base, environ, flag_value(args, "-P", "--provider"))})
