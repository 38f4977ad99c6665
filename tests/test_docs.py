"""Docs that tests keep true: every registered rule in the README table, every option in config.yaml."""

from __future__ import annotations

import dataclasses

import yaml

from context_engine.proxy.settings import ALL_KEYS
from context_engine.rules import DEFAULT_RULES, REGISTRY
from tests.conftest import REPO


def _config() -> dict:
    return yaml.safe_load((REPO / "config.yaml").read_text())


def test_every_setting_is_in_config_yaml():
    assert set(ALL_KEYS) <= set(_config())


def test_every_rule_is_in_the_readme_table():
    readme = (REPO / "README.md").read_text()
    table = readme.split("<!-- rules-table")[1].split("\n## ")[0]
    for name in REGISTRY:
        assert f"| `{name}` |" in table, f"{name} missing from the README rules table"


def test_every_rule_option_is_in_config_yaml():
    config = _config()
    assert list(config.get("rules") or {}) == list(REGISTRY)  # every rule, in run order
    for name, cls in REGISTRY.items():
        options = (config.get("rule_options") or {}).get(name) or {}
        for f in dataclasses.fields(cls.Config):
            assert f.name in options, f"rule_options.{name}.{f.name} missing from config.yaml"
            assert f.metadata.get("help"), f"{name}.{f.name} has no help line"


def test_default_rules_are_on_in_config_yaml():
    rules = _config().get("rules") or {}
    assert tuple(n for n, on in rules.items() if on) == DEFAULT_RULES


def test_every_rule_module_has_the_documented_sections():
    import importlib

    for name in REGISTRY:
        module = REGISTRY[name].__module__
        doc = importlib.import_module(module).__doc__ or ""
        for section in ("What it does", "Why", "Example", "Options", "Risks"):
            assert section in doc, f"{module} docstring lacks {section!r}"


def test_readme_rules_table_says_which_rules_are_on_by_default():
    readme = (REPO / "README.md").read_text()
    table = readme.split("<!-- rules-table")[1].split("\n## ")[0]
    for name in REGISTRY:
        row = next(line for line in table.splitlines() if line.startswith(f"| `{name}` |"))
        default = row.split(" | ")[2].strip()
        expected = "on" if name in DEFAULT_RULES else "off"
        assert default.split(" ")[0].rstrip(":;,") == expected, f"{name}: README says {default!r}"
