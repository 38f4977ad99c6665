"""``context-engine run copilot | qwen | cline`` with the real CLIs against the loopback
mock, offline, as tests/test_launcher_agents.py drives the others: the agent completes,
every ledger row carries its tag and project, and the user's config files keep no trace
of the proxy (byte-identical, except what an agent migrates itself). Skipped, with the reason, when the CLI is not installed (.ci/run installs
them). Crush has no real-CLI test (its npm package downloads its binary from GitHub's
releases at install time): its overrides, and every agent's, are unit-tested below."""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from context_engine.proxy.demo.mock_upstream import MockUpstream
from context_engine.proxy.launcher.agents import ANTHROPIC, OPENAI, flag_value, launch, own_upstream
from context_engine.proxy.launcher.cline_providers import cline_providers, cline_providers_path
from context_engine.proxy.launcher.qwen_settings import qwen_overrides
from context_engine.proxy.launcher.run import write_files
from tests.launcher_env import User, make_user

SCRIPT = [{"shell": "seq 1 4000"}, {"shell": "echo step-two-done"}, {"shell": "ls"},
          {"text": "All done."}]
ASK = "Count to 4000, then list the files."
BASE = "http://127.0.0.1:9/_tag/x/cA"
NO_COPILOT = pytest.mark.skipif(shutil.which("copilot") is None,
                                reason="Copilot CLI not installed (npm i -g @github/copilot)")
NO_QWEN = pytest.mark.skipif(shutil.which("qwen") is None,
                             reason="Qwen Code not installed (npm i -g @qwen-code/qwen-code)")
NO_CLINE = pytest.mark.skipif(shutil.which("cline") is None,
                              reason="Cline CLI not installed (npm i -g cline)")


@pytest.fixture
def user(tmp_path) -> Iterator[User]:
    yield from make_user(tmp_path, ANTHROPIC_API_KEY="sk-ant-run-test", OPENAI_API_KEY="sk-run-test")


def _config(user: User) -> str:
    config = user.root / "config.yaml"
    config.write_text("rule_options:\n  tool_json:\n    max_chars: 4000\n")
    return str(config)


def _saved(user: User, name: str, text: str) -> tuple[Path, bytes]:
    path = user.home / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path, path.read_bytes()


@pytest.mark.slow
@NO_COPILOT
def test_run_copilot_completes_tagged(user):
    """Copilot CLI's own-provider mode (Responses wire, as the user chose) through ``run``:
    no GitHub login, the user's OpenAI key as the provider's, the scripted shell session
    to its end; the rules run on the long output."""
    user.env.update(COPILOT_PROVIDER_WIRE_API="responses", COPILOT_OFFLINE="true",
                    COPILOT_AUTO_UPDATE="false")
    path, before = _saved(user, ".copilot/settings.json", '{"banner": "never"}\n')
    mock = MockUpstream(script=SCRIPT)
    with mock:
        done = user.run("run", "--upstream", mock.url + "/v1", "--config", _config(user), "copilot",
                        "-p", ASK, "--model", "gpt-5", "--allow-all-tools", "--disable-client-telemetry")
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        assert "All done." in done.stdout and "this run:" in done.stderr
        keys = {r.headers.get("authorization") for r in mock.received}
        rows = user.rows()
    assert keys == {"Bearer sk-run-test"}
    assert len(rows) >= 3 and {(r["agent"], r["project"], r["path"]) for r in rows} == {
        ("copilot", str(user.project), "/v1/responses")}
    assert all(r["status"] == 200 for r in rows)
    assert [r for r in rows if r["tokens_sent"] < r["tokens_original"]]  # the rules ran
    assert path.read_bytes() == before
    for state in user.home.glob(".copilot/*.json"):  # Copilot's own state: no proxy in it
        assert "127.0.0.1" not in state.read_text() and "_tag" not in state.read_text()


@pytest.mark.slow
@NO_QWEN
def test_run_qwen_completes_tagged(user):
    """Qwen Code through ``run`` although the user's settings chose Qwen OAuth and list
    the model with OpenAI's URL in ``modelProviders`` (which beats the environment):
    ``run`` selects the OpenAI provider and points the entry at the proxy for this run
    only; the settings file is left as it was."""
    user.env.update(OPENAI_MODEL="gpt-4o", QWEN_CODE_SYSTEM_SETTINGS_PATH=str(user.root / "etc.json"))
    settings = {"security": {"auth": {"selectedType": "qwen-oauth"}},
                "privacy": {"usageStatisticsEnabled": False},
                "modelProviders": {"openai": [{"id": "gpt-4o", "name": "GPT-4o", "envKey": "OPENAI_API_KEY",
                                               "baseUrl": "https://api.openai.com/v1"}]}}
    path, _ = _saved(user, ".qwen/settings.json", json.dumps(settings))
    with MockUpstream(script=[]) as mock:
        done = user.run("run", "--upstream", mock.url + "/v1", "qwen", "--yolo", ASK)
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        assert "Mock reply" in done.stdout and "this run:" in done.stderr
        rows = user.rows()
    assert len(rows) >= 2 and {(r["agent"], r["project"], r["path"]) for r in rows} == {
        ("qwen", str(user.project), "/v1/chat/completions")}
    assert all(r["status"] == 200 for r in rows)
    # Qwen Code migrates its settings file itself (a "$version" key); the choice stays the
    # user's and no address was written
    after = json.loads(path.read_text())
    assert {k: v for k, v in after.items() if k != "$version"} == settings
    assert "127.0.0.1" not in path.read_text() and "_tag" not in path.read_text()


@pytest.mark.slow
@NO_CLINE
@pytest.mark.parametrize(("flags", "path", "key"), [
    ([], "/v1/chat/completions", ("authorization", "Bearer sk-cline-user")),
    # another provider than the file's last used one: Cline would replace the file's
    # entries with a fresh one for it, without the proxy as its base URL
    (["-P", "anthropic", "-m", "claude-sonnet-4-5"], "/v1/messages", ("x-api-key", "sk-ant-run-test"))])
def test_run_cline_completes_tagged_with_a_copy_of_its_providers(user, flags, path, key):
    """Cline through ``run``: its provider comes from a copy of the user's
    ``providers.json`` pointed at the proxy, removed after the run; the user's file is
    byte-identical and no hub daemon was started."""
    tmp = user.root / "tmp"
    tmp.mkdir()
    user.env.update(TMPDIR=str(tmp))
    providers = {"version": 1, "lastUsedProvider": "openai-compatible", "modes": {}, "providers": {
        "openai-compatible": {"settings": {"provider": "openai-compatible", "apiKey": "sk-cline-user",
                                           "model": "gpt-4o", "baseUrl": "https://api.openai.com/v1"},
                              "updatedAt": "2026-01-01T00:00:00.000Z", "tokenSource": "manual"}}}
    saved, before = _saved(user, ".cline/data/settings/providers.json", json.dumps(providers, indent=2))
    mock = MockUpstream(script=[{"text": "unused"}])  # Messages: a text answer (no shell tool to script)
    with mock:
        done = user.run("run", "--upstream", mock.url + "/v1", "cline", *flags, ASK)
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        assert "Mock reply" in done.stdout and "this run:" in done.stderr
        keys = {r.headers.get(key[0]) for r in mock.received}
        rows = user.rows()
    assert keys == {key[1]}
    assert rows and {(r["agent"], r["project"], r["path"]) for r in rows} == {("cline", str(user.project), path)}
    assert all(r["status"] == 200 for r in rows)
    assert saved.read_bytes() == before
    assert not list(tmp.glob("context-engine-run-*"))  # the copy is gone
    assert not list((user.home / ".cline" / "data").glob("locks/hub/*"))  # no daemon left


def test_copilot_uses_the_users_provider_key_and_type():
    plain = launch("copilot", ["-p", "hi"], BASE, {"OPENAI_API_KEY": "sk-o"})
    assert plain.argv == ["copilot", "-p", "hi"]
    assert plain.env == {"COPILOT_PROVIDER_BASE_URL": BASE + "/v1", "COPILOT_PROVIDER_API_KEY": "sk-o"}
    claude = launch("copilot", [], BASE, {"COPILOT_PROVIDER_TYPE": "anthropic",
                                          "ANTHROPIC_API_KEY": "sk-a", "OPENAI_API_KEY": "sk-o"})
    assert claude.env == {"COPILOT_PROVIDER_BASE_URL": BASE, "COPILOT_PROVIDER_API_KEY": "sk-a"}
    own = launch("copilot", [], BASE, {"COPILOT_PROVIDER_BEARER_TOKEN": "t", "OPENAI_API_KEY": "sk-o"})
    assert own.env == {"COPILOT_PROVIDER_BASE_URL": BASE + "/v1"}  # the user's credential stays


def test_qwen_selects_openai_unless_told(tmp_path):
    environ = {"HOME": str(tmp_path), "QWEN_CODE_SYSTEM_SETTINGS_PATH": str(tmp_path / "none.json")}
    assert launch("qwen", ["-p", "hi"], BASE, environ).argv == ["qwen", "--auth-type", "openai", "-p", "hi"]
    chosen = launch("qwen", ["--auth-type=anthropic", "hi"], BASE, environ)
    assert chosen.argv == ["qwen", "--auth-type=anthropic", "hi"] and not chosen.files
    assert chosen.env == {"OPENAI_BASE_URL": BASE + "/v1", "ANTHROPIC_BASE_URL": BASE}


def test_qwen_points_the_winning_model_providers(tmp_path):
    """``modelProviders`` is replaced across scopes: the highest that has it is copied,
    its OpenAI and Anthropic entries pointed at the proxy, into the run's system file."""
    etc, user, defaults = tmp_path / "etc" / "settings.json", tmp_path / "settings.json", tmp_path / "d.json"
    etc.parent.mkdir()
    etc.write_text(json.dumps({"general": {"disableAutoUpdate": True}}))
    mine = {"openai": [{"id": "m", "baseUrl": "https://e.invalid/v1", "envKey": "K"}],
            "anthropic": [{"id": "c"}], "gemini": [{"id": "g", "baseUrl": "https://g.invalid"}]}
    user.write_text(json.dumps({"modelProviders": mine}))
    environ = {"QWEN_HOME": str(tmp_path), "QWEN_CODE_SYSTEM_SETTINGS_PATH": str(etc),
               "QWEN_CODE_SYSTEM_DEFAULTS_PATH": str(defaults)}
    env, files = qwen_overrides(environ, str(tmp_path / "project"), BASE)
    assert env == {"QWEN_CODE_SYSTEM_DEFAULTS_PATH": str(defaults)}
    system = json.loads(files["QWEN_CODE_SYSTEM_SETTINGS_PATH"])
    assert system["general"] == {"disableAutoUpdate": True}
    assert system["modelProviders"] == {"openai": [{"id": "m", "baseUrl": BASE + "/v1", "envKey": "K"}],
                                        "anthropic": [{"id": "c", "baseUrl": BASE}], "gemini": mine["gemini"]}
    workspace = tmp_path / "project" / ".qwen" / "settings.json"  # beats the user's
    workspace.parent.mkdir(parents=True)
    workspace.write_text(json.dumps({"modelProviders": {"openai": [{"id": "w"}]}}))
    _, files = qwen_overrides(environ, str(tmp_path / "project"), BASE)
    assert json.loads(files["QWEN_CODE_SYSTEM_SETTINGS_PATH"])["modelProviders"] == {
        "openai": [{"id": "w", "baseUrl": BASE + "/v1"}]}
    workspace.write_text("// a comment\n{}")  # not plain JSON: nothing handed over
    assert qwen_overrides(environ, str(tmp_path / "project"), BASE) == ({}, {})
    workspace.unlink()
    user.write_text(json.dumps({"model": {"name": "m"}}))  # no scope lists any
    assert qwen_overrides(environ, str(tmp_path / "project"), BASE) == ({}, {})


def test_crush_endpoints_and_no_detached_server():
    todo = launch("crush", ["run", "hi"], BASE, {})
    assert todo.argv == ["crush", "run", "hi"] and not todo.files
    assert todo.env == {"OPENAI_API_ENDPOINT": BASE + "/v1", "CRUSH_OPENAI_API_ENDPOINT": BASE + "/v1",
                        "ANTHROPIC_API_ENDPOINT": BASE, "CRUSH_ANTHROPIC_API_ENDPOINT": BASE,
                        "CRUSH_CLIENT_SERVER": "0"}


def test_cline_points_the_users_providers_and_keeps_the_rest(tmp_path):
    given: dict[str, Any] = {"version": 1, "lastUsedProvider": "anthropic", "modes": {"plan": "x"}, "providers": {
        "anthropic": {"settings": {"provider": "anthropic", "apiKey": "k", "model": "m"}},
        "openai-native": {"settings": {"provider": "openai-native", "baseUrl": "https://e.invalid/v1"}},
        "openrouter": {"settings": {"provider": "openrouter", "apiKey": "r"}}}}
    path = tmp_path / "data" / "settings" / "providers.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(given))
    todo = launch("cline", ["hi"], BASE, {"CLINE_DATA_DIR": str(tmp_path / "data")})
    assert todo.env == {"CLINE_SESSION_BACKEND_MODE": "local"}
    copy = json.loads(todo.files["CLINE_PROVIDER_SETTINGS_PATH"])
    assert copy["providers"]["anthropic"]["settings"] == {"provider": "anthropic", "apiKey": "k",
                                                          "model": "m", "baseUrl": BASE + "/v1"}
    assert copy["providers"]["openai-native"]["settings"]["baseUrl"] == BASE + "/v1"
    assert copy["providers"]["openrouter"] == given["providers"]["openrouter"]  # not ours to move
    assert (copy["lastUsedProvider"], copy["modes"]) == ("anthropic", {"plan": "x"})
    assert json.loads(path.read_text()) == given
    assert launch("cline", [], BASE, {"CLINE_SESSION_BACKEND_MODE": "hub",
                                      "HOME": str(tmp_path)}).env == {}  # the user's choice


def test_cline_provider_named_on_the_command_line_becomes_the_last_used():
    given = json.dumps({"lastUsedProvider": "openai-compatible", "providers": {
        "openai-compatible": {"settings": {"provider": "openai-compatible", "apiKey": "k"}},
        "anthropic": {"settings": {"provider": "anthropic", "apiKey": "a"}}}})
    for args in (["-P", "anthropic", "hi"], ["--provider=anthropic"], ["--provider", "anthropic"]):
        copy = json.loads(cline_providers(given, BASE, {}, flag_value(args, "-P", "--provider")))
        assert copy["lastUsedProvider"] == "anthropic" and len(copy["providers"]) == 2
    added = json.loads(cline_providers(given, BASE, {"OPENAI_API_KEY": "o"}, "openai-native"))
    assert added["lastUsedProvider"] == "openai-native"
    assert added["providers"]["openai-native"]["settings"] == {
        "provider": "openai-native", "baseUrl": BASE + "/v1", "apiKey": "o"}
    other = json.loads(cline_providers(given, BASE, {}, "openrouter"))  # not ours: left to Cline
    assert other["lastUsedProvider"] == "openrouter" and "openrouter" not in other["providers"]
    assert flag_value(["-m", "x", "hi"], "-P", "--provider") is None


def test_the_anthropic_api_chosen_for_a_run_picks_anthropics_upstream():
    assert own_upstream("copilot", [], {"COPILOT_PROVIDER_TYPE": "Anthropic"}) == ANTHROPIC
    assert own_upstream("copilot", [], {}) == OPENAI
    assert own_upstream("qwen", ["--auth-type", "anthropic", "hi"], {}) == ANTHROPIC
    assert own_upstream("qwen", ["--auth-type=anthropic"], {}) == ANTHROPIC
    assert own_upstream("qwen", ["--auth-type", "openai", "anthropic"], {}) == OPENAI
    assert own_upstream("cline", ["-P", "anthropic"], {}) == ANTHROPIC
    assert own_upstream("cline", ["--provider=openai-native"], {}) == OPENAI
    assert own_upstream("claude", [], {}) == ANTHROPIC


@pytest.mark.parametrize("given", ["", "not json", "[1]", '{"providers": []}'])
def test_cline_without_a_usable_file_gets_an_openai_compatible_provider(given):
    copy = json.loads(cline_providers(given, BASE, {"OPENAI_API_KEY": "sk-o"}))
    assert copy["lastUsedProvider"] == "openai-compatible"
    assert copy["providers"]["openai-compatible"]["settings"] == {
        "provider": "openai-compatible", "baseUrl": BASE + "/v1", "apiKey": "sk-o"}


def test_cline_providers_path_follows_clines_variables(tmp_path):
    home = {"HOME": str(tmp_path)}
    assert cline_providers_path(home) == tmp_path / ".cline" / "data" / "settings" / "providers.json"
    assert cline_providers_path(home | {"CLINE_DIR": "/c"}) == Path("/c/data/settings/providers.json")
    assert cline_providers_path(home | {"CLINE_DATA_DIR": "/d"}) == Path("/d/settings/providers.json")
    assert cline_providers_path(home | {"CLINE_PROVIDER_SETTINGS_PATH": "/p.json"}) == Path("/p.json")


def test_one_run_files_are_private(tmp_path):
    env = write_files({"B_PATH": "b", "A_PATH": '{"a": 1}'}, str(tmp_path))
    assert sorted(env) == ["A_PATH", "B_PATH"]
    assert Path(env["A_PATH"]).read_text() == '{"a": 1}' and Path(env["B_PATH"]).read_text() == "b"
    assert all(stat.S_IMODE(os.stat(p).st_mode) == 0o600 for p in env.values())
