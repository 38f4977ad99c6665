"""``cache:`` options, ``profiles:`` (model-name globs → rules and options) and the
per-request ``X-Context-Engine-Rules: off|lossless|default`` header.

Validated at start-up (``ConfigError`` naming the bad key); the engine builds one
pipeline per profile, plus the lossless one, once.

```yaml
cache:
  prompt_cache_key: off      # off | session
  auto_breakpoints: false
profiles:
  - match: ["claude-*", "anthropic/*"]
    rules: {fold_duplicates: true, tool_json: true}
  - match: "gpt-4o-mini*"
    rule_options: {retrieve: {max_snippet_tokens: 800}}
```
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

HEADER = "x-context-engine-rules"
CHOICES = ("off", "lossless", "default")
PROMPT_CACHE_KEYS = ("off", "session")


@dataclass(frozen=True)
class CacheOptions:
    prompt_cache_key: str = field(default="off", metadata={
        "help": "off | session: set prompt_cache_key (OpenAI) to a hash of the session id when "
                "the client set none — the one field the proxy may add to a request"})
    auto_breakpoints: bool = field(default=False, metadata={
        "help": "where the client set no cache_control, add one after the system prompt and one "
                "at the last closed block boundary (Anthropic-style caching)"})


@dataclass(frozen=True)
class Profile:
    match: tuple[str, ...]
    rules: tuple[str, ...] | None  # None: the top-level rules
    rule_options: Mapping[str, Mapping[str, Any]]

    def matches(self, model: str) -> bool:
        return any(fnmatch.fnmatchcase(model, g) for g in self.match)


def parse_cache(value: Any, error: type[Exception]) -> CacheOptions:
    if value is None:
        return CacheOptions()
    if not isinstance(value, Mapping):
        raise error("cache: expected a mapping (prompt_cache_key, auto_breakpoints)")
    valid = [f.name for f in dataclasses.fields(CacheOptions)]
    for key in value:
        if key not in valid:
            raise error(f"cache.{key}: unknown option; valid options: {', '.join(valid)}")
    key = value.get("prompt_cache_key", "off")
    key = "off" if key is False else key
    if key not in PROMPT_CACHE_KEYS:
        raise error(f"cache.prompt_cache_key: {key!r} is not valid; valid: {', '.join(PROMPT_CACHE_KEYS)}")
    auto = value.get("auto_breakpoints", False)
    if not isinstance(auto, bool):
        raise error(f"cache.auto_breakpoints: expected true or false, got {auto!r}")
    return CacheOptions(key, auto)


def parse_profiles(value: Any, options: Mapping[str, Mapping[str, Any]], error: type[Exception],
                   parse_rules: Any, check_options: Any) -> tuple[Profile, ...]:
    """``profiles:`` as Profiles; each one's options are the top-level ones overridden."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise error("profiles: expected a list of {match, rules, rule_options}")
    out = []
    for i, p in enumerate(value):
        where = f"profiles[{i}]"
        if not isinstance(p, Mapping):
            raise error(f"{where}: expected a mapping with match, rules and/or rule_options")
        for key in p:
            if key not in ("match", "rules", "rule_options"):
                raise error(f"{where}.{key}: unknown key; valid keys: match, rules, rule_options")
        globs = p.get("match")
        globs = [globs] if isinstance(globs, str) else globs
        if not globs or not isinstance(globs, list) or not all(isinstance(g, str) and g for g in globs):
            raise error(f"{where}.match: expected a model-name glob or a list of them")
        rules = parse_rules(p["rules"], where) if "rules" in p else None
        extra = p.get("rule_options") or {}
        if not isinstance(extra, Mapping):
            raise error(f"{where}.rule_options: expected a mapping of rule name to options")
        merged = {k: dict(v) for k, v in options.items()}
        for name, opts in extra.items():
            if not isinstance(opts, Mapping):
                raise error(f"{where}.rule_options.{name}: expected a mapping of options")
            merged.setdefault(str(name), {}).update(opts)
            try:
                check_options(str(name), merged[str(name)])
            except error as exc:
                raise error(f"{where}.{exc}") from None
        out.append(Profile(tuple(globs), rules, merged))
    return tuple(out)


def rules_choice(headers: Mapping[str, str]) -> str | None:
    """The header's value, or None when absent; ValueError when not one of CHOICES."""
    value = headers.get(HEADER)
    if value is None:
        return None
    value = value.strip().lower()
    if value not in CHOICES:
        raise ValueError(f"{HEADER}: {value!r} is not valid; valid values: {', '.join(CHOICES)}")
    return value


def variants(settings: Any, lossless: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Settings of every pipeline the engine builds: ``lossless`` and ``profile:<i>``.
    ``lossless`` maps each rule that declares the contract's ``Lossless`` to the options
    it runs with there (over the configured ones): the enabled ones of them, in order,
    change the form of the context, never its facts."""
    out = {}
    rules = tuple(r for r in settings.rules if r in lossless)
    options = {k: dict(v) for k, v in settings.rule_options.items()}
    for name, opts in lossless.items():
        options.setdefault(name, {}).update(opts)
    out["lossless"] = dataclasses.replace(settings, rules=rules, rule_options=options)
    for i, p in enumerate(settings.profiles):
        out[f"profile:{i}"] = dataclasses.replace(
            settings, rules=settings.rules if p.rules is None else p.rules, rule_options=p.rule_options)
    return out


def pick(settings: Any, model: str, choice: str | None) -> str:
    """Which pipeline serves a request: ``off``, ``lossless``, ``profile:<i>`` or ``default``."""
    if choice in ("off", "lossless"):
        return choice
    for i, p in enumerate(settings.profiles):
        if p.matches(model):
            return f"profile:{i}"
    return "default"


def prompt_cache_key(session: str) -> str:
    return "ce-" + hashlib.sha256(session.encode()).hexdigest()[:32]


def add_prompt_cache_key(raw: bytes, session: str) -> bytes:
    """The body with ``"prompt_cache_key"`` appended as its last field (the rest of the
    bytes as they were)."""
    text = raw.rstrip()
    if not text.endswith(b"}"):
        return raw
    body = text[:-1].rstrip()
    sep = b"" if body.endswith(b"{") else b","
    return body + sep + b'"prompt_cache_key":"' + prompt_cache_key(session).encode() + b'"}'
