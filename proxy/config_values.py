"""Reading setting values: the error every bad one raises, a value coerced to its
field's type, and the YAML file (``proxy/settings.py`` puts them together)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import yaml


class ConfigError(ValueError):
    """A bad setting; the message names the key and what would be valid."""


def coerce(key: str, value: Any, kind: type) -> Any:
    try:
        if kind is bool and isinstance(value, str):
            if value.lower() in ("1", "true", "yes", "on"):
                return True
            if value.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        if kind in (int, float) and isinstance(value, bool):
            raise ValueError(value)
        if kind is int and isinstance(value, float) and not value.is_integer():
            raise ValueError(value)
        return kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key}: {value!r} is not a valid {kind.__name__}") from None


def field_type(cls: type, name: str) -> type:
    hints = {f.name: f for f in dataclasses.fields(cls)}
    default, factory = hints[name].default, hints[name].default_factory
    if default is dataclasses.MISSING and callable(factory):
        default = factory()
    return type(default)


def rule_config(name: str, cls: type, options: Mapping[str, Any]) -> Any:
    """``rule_options.<name>`` checked and coerced into the rule's config class ``cls``."""
    valid = [f.name for f in dataclasses.fields(cls)]
    clean = {}
    for key, value in (options or {}).items():
        if key not in valid:
            raise ConfigError(
                f"rule_options.{name}.{key}: unknown option; valid options: {', '.join(valid)}")
        kind = field_type(cls, key)
        if kind in (list, tuple, dict):
            if not isinstance(value, kind if kind is not tuple else (list, tuple)):
                raise ConfigError(f"rule_options.{name}.{key}: expected a {kind.__name__}")
            clean[key] = tuple(value) if kind is tuple else value
        else:
            clean[key] = coerce(f"rule_options.{name}.{key}", value, kind)
    try:
        return cls(**clean)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"rule_options.{name}: {exc}") from None


def read_yaml(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except OSError as exc:
        raise ConfigError(f"config: cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config: {path} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config: {path} must hold a mapping of settings")
    return data
