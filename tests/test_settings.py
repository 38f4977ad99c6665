"""Settings precedence and fail-closed validation."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

import pytest

from context_engine.proxy.engine.context import RequestContext
from context_engine.proxy.engine.contract import Rule, RuleDeps, option
from context_engine.proxy.settings import ConfigError, build_rule_config, load_settings
from context_engine.rules import REGISTRY


@dataclass(frozen=True)
class DemoConfig:
    window: int = option(3, "turns kept")
    ratio: float = option(0.5, "a ratio")


class DemoRule:
    name = "demo_rule"
    Config = DemoConfig

    def __init__(self, config: DemoConfig, deps: RuleDeps) -> None:
        self.config = config

    async def apply(self, ctx: RequestContext) -> RequestContext:
        return ctx


# The product's rules plus a demo one, passed as ``registry=`` (REGISTRY itself is left alone).
WITH_DEMO: dict[str, type[Rule]] = {**REGISTRY, DemoRule.name: DemoRule}


def write(tmp_path, text):
    p = tmp_path / "config.yaml"
    p.write_text(text)
    return str(p)


def test_flags_beat_env_beat_file(tmp_path):
    path = write(tmp_path, "port: 9000\nhost: 0.0.0.0\nupstream: http://file/v1\n")
    s = load_settings(flags={"port": 9100}, env={"CONTEXT_ENGINE_PORT": "9050",
                                                 "CONTEXT_ENGINE_HOST": "10.0.0.1"}, config_path=path)
    assert (s.port, s.host, s.upstream) == (9100, "10.0.0.1", "http://file/v1")
    s = load_settings(env={"CONTEXT_ENGINE_PORT": "9050"}, config_path=path)
    assert s.port == 9050


def test_rules_flag_empty_means_passthrough(tmp_path):
    path = write(tmp_path, "rules:\n  demo_rule: true\n")
    assert load_settings(env={}, config_path=path, registry=WITH_DEMO).rules == ("demo_rule",)
    assert load_settings(flags={"rules": ""}, env={}, config_path=path,
                         registry=WITH_DEMO).rules == ()
    assert load_settings(env={"CONTEXT_ENGINE_RULES": ""}, config_path=path,
                         registry=WITH_DEMO).rules == ()


def test_disabled_rule_is_off_and_options_are_typed(tmp_path):
    path = write(tmp_path, "rules:\n  demo_rule: false\nrule_options:\n  demo_rule:\n    window: 5\n")
    s = load_settings(env={}, config_path=path, registry=WITH_DEMO)
    assert s.rules == ()
    assert build_rule_config("demo_rule", s.rule_options["demo_rule"], WITH_DEMO).window == 5


@pytest.mark.parametrize("text,needle", [
    ("prot: 1\n", "prot: unknown setting"),
    ("mode: turbo\n", "valid modes: rewrite, shadow, ab"),
    ("port: lots\n", "port: 'lots' is not a valid int"),
    ("upstream: ftp://x\n", "upstream"),
    ("rules:\n  no_such_rule: true\n", "unknown rule 'no_such_rule'"),
    ("rules:\n  demo_rule: maybe\n", "rules.demo_rule: expected true or false"),
    ("rule_options:\n  demo_rule:\n    windw: 2\n", "rule_options.demo_rule.windw: unknown option; valid options: window, ratio"),
    ("rule_options:\n  demo_rule:\n    window: two\n", "rule_options.demo_rule.window"),
    ("- a\n- b\n", "must hold a mapping"),
    ("a: [\n", "not valid YAML"),
])
def test_bad_config_names_the_key(tmp_path, text, needle):
    with pytest.raises(ConfigError, match=None) as err:
        load_settings(env={}, config_path=write(tmp_path, text), registry=WITH_DEMO)
    assert needle in str(err.value)


def test_a_rule_outside_the_registry_is_unknown(tmp_path):
    """The demo rule exists only in the registry passed in: the product's is unchanged."""
    assert "demo_rule" not in REGISTRY
    with pytest.raises(ConfigError, match="unknown rule 'demo_rule'"):
        load_settings(env={}, config_path=write(tmp_path, "rules:\n  demo_rule: true\n"))


def test_serve_refuses_to_start_on_bad_config(tmp_path):
    path = write(tmp_path, "mode: turbo\n")
    r = subprocess.run([sys.executable, "-m", "context_engine.proxy.cli", "serve", "--config", path],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "bad configuration: mode: 'turbo' is not valid; valid modes" in r.stderr
    assert "Traceback" not in r.stderr


def test_repo_config_yaml_loads():
    from tests.conftest import REPO

    s = load_settings(env={}, config_path=str(REPO / "config.yaml"))
    assert s.port == 8787
