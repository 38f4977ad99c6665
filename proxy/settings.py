"""Settings: flags, then environment variables, then config.yaml, then defaults.

Everything is validated here, at start-up: an unknown key, a bad value, an unknown rule
or a bad rule option raises ``ConfigError`` naming the key and the valid choices, and
the server does not start. The hot path only reads the prepared ``Settings``.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from context_engine.proxy.config_values import ConfigError as ConfigError  # re-exported
from context_engine.proxy.config_values import coerce, field_type, read_yaml, rule_config
from context_engine.proxy.engine.contract import Registry, Rule, RuleDeps, lossless_options
from context_engine.proxy.engine.profiles import CacheOptions, Profile, parse_cache, parse_profiles
from context_engine.proxy.engine.recall_options import RecallOptions, parse_recall
from context_engine.proxy.engine.sessions import KINDS
from context_engine.proxy.recording.ledger import ledger_kind
from context_engine.rules import DEFAULT_RULES, REGISTRY

MODES = ("rewrite", "shadow", "ab")
ENV_PREFIX = "CONTEXT_ENGINE_"


@dataclass(frozen=True)
class Settings:
    host: str = field(default="127.0.0.1", metadata={"help": "address to listen on"})
    admin_token: str = field(default="", metadata={
        "help": "Bearer token for /stats, /dashboard and /metrics; required off loopback"})
    client_tokens: str = field(default="", metadata={
        "help": "tokens a client must present on /v1/* (X-Context-Engine-Token, or as its API "
                "key before a keyless upstream), comma separated, 16+ characters each; "
                "empty = the upstream's keys guard the API"})
    allowed_hosts: str = field(default="", metadata={
        "help": "extra Host names accepted on loopback, comma separated (DNS-rebinding guard)"})
    allowed_origins: str = field(default="", metadata={
        "help": "browser origins (scheme://host[:port]) that may call the proxy, comma separated; "
                "a request from any other web page (an Origin or a cross-site Sec-Fetch-Site "
                "header) gets 403"})
    session_key: str = field(default="", metadata={
        "help": "secret keying caller scopes in session ids; empty = derived from the store"})
    port: int = field(default=8787, metadata={"help": "port to listen on"})
    upstream: str = field(default="https://api.openai.com/v1",
                          metadata={"help": "base URL requests are forwarded to"})
    upstream_timeout: float = field(default=600.0,
                                    metadata={"help": "seconds to wait for upstream bytes"})
    connect_timeout: float = field(default=10.0,
                                   metadata={"help": "seconds to wait for a connection"})
    max_body_bytes: int = field(default=32 * 1024 * 1024,
                                metadata={"help": "largest request body accepted (413 above)"})
    shutdown_grace: float = field(default=5.0, metadata={
        "help": "seconds SIGTERM lets requests in flight run before they are cut; the ledger "
                "is flushed first and after, within 3 s more (keep the sum under the "
                "container's stop grace period)"})
    rules_max_body_bytes: int = field(default=2 * 1024 * 1024, metadata={
        "help": "larger request bodies (about 500k tokens) go out as sent: the rules never start on them"})
    rules_max_messages: int = field(default=10_000, metadata={
        "help": "a conversation of more messages goes out as sent: the rules never start on it"})
    max_inflight_body_bytes: int = field(default=256 * 1024 * 1024, metadata={
        "help": "request body bytes being read or prepared at once, over all requests (503 beyond)"})
    body_read_timeout: float = field(default=60.0, metadata={
        "help": "seconds to receive a request body (408 beyond)"})
    max_connections: int = field(default=1000, metadata={
        "help": "connections served at once (uvicorn limit_concurrency; 503 beyond)"})
    ledger: str = field(default=".context-engine/ledger.db", metadata={
        "help": "one row per request: a SQLite file path, or postgresql://… shared by replicas"})
    ledger_retention_days: float = field(default=90.0, metadata={
        "help": "delete ledger rows older than this many days, at start-up and hourly (0 = keep "
                "forever); 90 days covers a quarter's reports, and rows hold session ids, "
                "project folders and error texts nobody needs for longer"})
    replica: str = field(default="", metadata={
        "help": "this process's name in the ledger's replica column (default: host name:port)"})
    otel: bool = field(default=False, metadata={
        "help": "emit an OpenTelemetry span per request over OTLP (standard OTEL_* variables)"})
    store: str = field(default=".context-engine/store",
                       metadata={"help": "store: a directory (diskcache), memory://, redis://…"})
    store_ttl_days: float = field(default=30.0, metadata={
        "help": "every store: a key (a stored tool result, a summary) expires this many days "
                "after it was last written or read (0 = never)"})
    store_scope_bytes: int = field(default=64 * 1024 * 1024, metadata={
        "help": "bytes each caller scope (API key) may occupy in the store; past it that "
                "scope's least recently used keys leave, no one else's (0 = no bound; "
                "memory://: at most a quarter of the store each)"})
    mode: str = field(default="rewrite", metadata={"help": "rewrite | shadow | ab"})
    ab_share: float = field(default=0.5,
                            metadata={"help": "ab mode: share of sessions rewritten (0-1)"})
    ab_guard_rereads_per_session: float = field(default=0.0, metadata={
        "help": "ab mode: a rule whose re-reads per rewritten session pass this is turned off "
                "for new sessions (ab.guard; 0 = off)"})
    ab_guard_min_sessions: int = field(default=10, metadata={
        "help": "ab.guard judges a rule only after this many rewritten sessions ran it"})
    log_level: str = field(default="info", metadata={"help": "debug | info | warning | error"})
    stream_coalesce_ms: float = field(default=10.0, metadata={
        "help": "an SSE stream's small events that arrive within this many ms are read and "
                "go out in one write, byte for byte (0 = each as it comes); a "
                "token-a-millisecond stream otherwise costs the event loop a read and a "
                "write per token"})
    rules_deadline_ms: float = field(default=250.0, metadata={
        "help": "a rewrite not done this long after the request arrived sends the original (failed open; 0 = no deadline)"})
    rules_deadline_per_10k_tokens_ms: float = field(default=60.0, metadata={
        "help": "added to rules_deadline_ms per 10k tokens of the request (estimated as body bytes / 4): a long history has more to index"})
    rules_deadline_max_ms: float = field(default=1000.0, metadata={
        "help": "the scaled deadline never grows past this (or rules_deadline_ms, if larger)"})
    rule_workers: int = field(default=0, metadata={
        "help": "threads that run rewrites of different sessions in parallel (0 = the cores)"})
    rules_queue: int = field(default=256, metadata={
        "help": "rewrites waiting or running at most (more: the original goes out); also the background queue"})
    session_kind: str = field(default="auto", metadata={
        "help": "auto | chat | agent: how rules plan a session (auto: agent when it carries tool calls or text-action observations)"})
    rules: tuple[str, ...] = field(default=(), metadata={"help": "enabled rules, in run order"})
    rule_options: Mapping[str, Mapping[str, Any]] = field(
        default_factory=dict, metadata={"help": "per-rule options"})
    cache: CacheOptions = field(default_factory=CacheOptions,
                                metadata={"help": "prompt_cache_key, auto_breakpoints (proxy/engine/profiles.py)"})
    profiles: tuple[Profile, ...] = field(
        default=(), metadata={"help": "model-name globs → rules and option overrides"})
    recall: RecallOptions = field(default_factory=RecallOptions,
                                  metadata={"help": "the context_recall tool (proxy/engine/recall_options.py)"})

    def build_rules(self, deps: RuleDeps, registry: Registry | None = None) -> list[Rule]:
        """These settings' rules, built (``build_rules``): how the engine gets them without
        importing this module, which imports the rules."""
        return build_rules(self, deps, registry)

    def lossless(self, registry: Registry | None = None) -> dict[str, Mapping[str, Any]]:
        """Each rule of ``registry`` that declares the contract's ``Lossless``: its name →
        the options it runs with in the lossless profile."""
        found = {n: lossless_options(c) for n, c in (REGISTRY if registry is None else registry).items()}
        return {name: opts for name, opts in found.items() if opts is not None}


SCALAR_KEYS = [f.name for f in dataclasses.fields(Settings)
               if f.name not in ("rules", "rule_options", "cache", "profiles", "recall")]
ALL_KEYS = [f.name for f in dataclasses.fields(Settings)]


def parse_rules(value: Any, source: str, registry: Registry = REGISTRY) -> tuple[str, ...]:
    """``rules`` from config.yaml (mapping name → on/off, in order) or a comma list."""
    if isinstance(value, str):
        names = [n.strip() for n in value.split(",") if n.strip()]
    elif isinstance(value, Mapping):
        names = []
        for name, on in value.items():
            if not isinstance(on, bool):
                raise ConfigError(f"rules.{name}: expected true or false, got {on!r}")
            if on:
                names.append(str(name))
        for name in value:
            _check_rule_name(str(name), source, registry)
    elif isinstance(value, list):
        names = [str(n) for n in value]
    elif value is None:
        names = []
    else:
        raise ConfigError(f"rules: expected a mapping of rule name to true/false ({source})")
    for name in names:
        _check_rule_name(name, source, registry)
    if len(set(names)) != len(names):
        raise ConfigError(f"rules: a rule is listed twice ({source})")
    return tuple(names)


def _check_rule_name(name: str, source: str, registry: Registry) -> None:
    if name not in registry:
        valid = ", ".join(sorted(registry)) or "(none registered)"
        raise ConfigError(f"rules: unknown rule {name!r} ({source}); valid rules: {valid}")


def build_rule_config(name: str, options: Mapping[str, Any], registry: Registry = REGISTRY) -> Any:
    return rule_config(name, registry[name].Config, options)


def load_settings(
    flags: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    config_path: str | None = None,
    registry: Registry = REGISTRY,
) -> Settings:
    """Merge the three sources and validate every value; rule names and options are
    checked against ``registry`` (tests pass their own rules here)."""
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    env = dict(os.environ if env is None else env)
    path = config_path or flags.get("config") or env.get(ENV_PREFIX + "CONFIG")
    file_values: dict[str, Any] = {}
    if path:
        file_values = read_yaml(path)
    elif Path("config.yaml").is_file():
        path = "config.yaml"
        file_values = read_yaml(path)
    source = path or "defaults"

    values: dict[str, Any] = {}
    for key, value in file_values.items():
        if key not in ALL_KEYS:
            raise ConfigError(f"{key}: unknown setting in {source}; valid settings: {', '.join(ALL_KEYS)}")
        values[key] = value
    for key in SCALAR_KEYS + ["rules"]:
        env_key = ENV_PREFIX + key.upper()
        if env_key in env:
            values[key] = env[env_key]
    for key, value in flags.items():
        if key in ALL_KEYS:
            values[key] = value

    out: dict[str, Any] = {}
    for key in SCALAR_KEYS:
        if key in values:
            out[key] = coerce(key, values[key], field_type(Settings, key))
    out["rules"] = (parse_rules(values["rules"], source, registry) if "rules" in values
                    else DEFAULT_RULES)
    options = values.get("rule_options") or {}
    if not isinstance(options, Mapping):
        raise ConfigError("rule_options: expected a mapping of rule name to options")
    for name, opts in options.items():
        _check_rule_name(str(name), source, registry)
        if opts is not None and not isinstance(opts, Mapping):
            raise ConfigError(f"rule_options.{name}: expected a mapping of options")
        build_rule_config(str(name), opts or {}, registry)
    out["rule_options"] = {str(k): dict(v or {}) for k, v in options.items()}
    out["cache"] = parse_cache(values.get("cache"), ConfigError)
    out["recall"] = parse_recall(values.get("recall"), ConfigError)
    out["profiles"] = parse_profiles(values.get("profiles"), out["rule_options"], ConfigError,
                                     functools.partial(parse_rules, registry=registry),
                                     functools.partial(build_rule_config, registry=registry))
    settings = Settings(**out)
    _check(settings)
    return settings


def _check(s: Settings) -> None:
    if s.mode not in MODES:
        raise ConfigError(f"mode: {s.mode!r} is not valid; valid modes: {', '.join(MODES)}")
    if not s.upstream.startswith(("http://", "https://")):
        raise ConfigError(f"upstream: {s.upstream!r} must be an http:// or https:// URL")
    if not 0 < s.port < 65536:
        raise ConfigError(f"port: {s.port} is out of range 1-65535")
    if not 0.0 <= s.ab_share <= 1.0:
        raise ConfigError(f"ab_share: {s.ab_share} must be between 0 and 1")
    if not s.ab_guard_rereads_per_session >= 0.0:
        raise ConfigError(f"ab_guard_rereads_per_session: {s.ab_guard_rereads_per_session} must be 0 (off) or more")
    if s.ab_guard_min_sessions < 1:
        raise ConfigError(f"ab_guard_min_sessions: {s.ab_guard_min_sessions} must be 1 or more")
    try:
        ledger_kind(s.ledger)
    except ValueError as exc:
        raise ConfigError(f"ledger: {exc}") from None
    if s.store_ttl_days < 0:
        raise ConfigError(f"store_ttl_days: {s.store_ttl_days} must be 0 (never expire) or more")
    if s.store_scope_bytes < 0:
        raise ConfigError(f"store_scope_bytes: {s.store_scope_bytes} must be 0 (no bound) or more")
    if s.ledger_retention_days < 0:
        raise ConfigError(f"ledger_retention_days: {s.ledger_retention_days} must be 0 (keep) or more")
    if s.rules_deadline_ms < 0 or s.rule_workers < 0 or s.rules_queue < 1:
        raise ConfigError("rules_deadline_ms and rule_workers must be at least 0, rules_queue at least 1")
    for key in ("rules_deadline_per_10k_tokens_ms", "rules_deadline_max_ms"):
        if getattr(s, key) < 0:
            raise ConfigError(f"{key}: {getattr(s, key)} must be at least 0")
    if not 0 <= s.stream_coalesce_ms <= 1000:
        raise ConfigError(f"stream_coalesce_ms: {s.stream_coalesce_ms} must be 0 to 1000")
    if s.max_body_bytes <= 0 or s.upstream_timeout <= 0 or s.connect_timeout <= 0:
        raise ConfigError("max_body_bytes, upstream_timeout and connect_timeout must be positive")
    if not 0 <= s.shutdown_grace <= 3600:
        raise ConfigError(f"shutdown_grace: {s.shutdown_grace} must be 0 to 3600 seconds")
    if s.session_kind not in KINDS:
        raise ConfigError(f"session_kind: {s.session_kind!r} is not valid; valid kinds: {', '.join(KINDS)}")
    for key in ("rules_max_body_bytes", "rules_max_messages", "max_inflight_body_bytes", "body_read_timeout",
                "max_connections"):
        if getattr(s, key) <= 0:
            raise ConfigError(f"{key}: {getattr(s, key)} must be positive")
    levels = ("debug", "info", "warning", "error")
    if s.log_level not in levels:
        raise ConfigError(f"log_level: {s.log_level!r} is not valid; valid levels: {', '.join(levels)}")


def build_rules(settings: Settings, deps: RuleDeps, registry: Registry | None = None) -> list[Rule]:
    """Instantiate the enabled rules in order (at start-up, never per request); ``registry``
    defaults to the project's."""
    registry = REGISTRY if registry is None else registry
    rules = []
    for name in settings.rules:
        config = build_rule_config(name, settings.rule_options.get(name, {}), registry)
        try:
            rules.append(registry[name](config, deps))
        except (ValueError, TypeError, OSError) as exc:
            raise ConfigError(f"rule_options.{name}: {exc}") from None
    return rules
