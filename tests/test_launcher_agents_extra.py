"""``context-engine run grok | cn`` (Grok CLI, Continue CLI) with the real CLIs against the
loopback mock, offline, as tests/test_launcher_more_agents.py drives the others: the agent
completes, every ledger row carries its tag and project, and the user's config files are
byte-identical afterwards. Skipped, with the reason, when the CLI is not installed
(.ci/run installs them). The overrides themselves are unit-tested below."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from context_engine.proxy.demo.mock_upstream import MockUpstream
from context_engine.proxy.launcher.agents import ANTHROPIC, OPENAI, launch, own_upstream
from context_engine.proxy.launcher.continue_config import (
    VARIABLE,
    WRAPPER,
    continue_config,
    split_config,
)
from context_engine.proxy.launcher.grok_settings import XAI
from tests.launcher_env import User, make_user

ASK = "Count to 4000, then list the files."
BASE = "http://127.0.0.1:9/_tag/x/cA"
NO_GROK = pytest.mark.skipif(shutil.which("grok") is None,
                             reason="Grok CLI not installed (npm i -g @vibe-kit/grok-cli)")
NO_CN = pytest.mark.skipif(shutil.which("cn") is None,
                           reason="Continue CLI not installed (npm i -g @continuedev/cli)")


@pytest.fixture
def user(tmp_path) -> Iterator[User]:
    yield from make_user(tmp_path, ANTHROPIC_API_KEY="sk-ant-run-test", OPENAI_API_KEY="sk-run-test")


def _saved(user: User, name: str, text: str) -> tuple[Path, bytes]:
    path = user.home / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path, path.read_bytes()


@pytest.mark.slow
@NO_GROK
def test_run_grok_completes_tagged(user):
    """Grok CLI headless (``-p``) through ``run``: ``GROK_BASE_URL`` beats the ``baseURL``
    of the user's settings, which stay as they were; the tool round and the answer both
    go through the proxy."""
    user.env.update(GROK_API_KEY="xai-run-test")
    path, before = _saved(user, ".grok/user-settings.json", json.dumps(
        {"baseURL": "https://api.x.ai/v1", "defaultModel": "grok-code-fast-1"}))
    mock = MockUpstream()
    with mock:
        done = user.run("run", "--upstream", mock.url + "/v1", "grok", "-p", ASK, "-m", "grok-code-fast-1")
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        assert "Mock reply" in done.stdout and "this run:" in done.stderr
        keys = {r.headers.get("authorization") for r in mock.received}
        rows = user.rows()
    assert keys == {"Bearer xai-run-test"}
    assert len(rows) >= 2 and {(r["agent"], r["project"], r["path"]) for r in rows} == {
        ("grok", str(user.project), "/v1/chat/completions")}
    assert all(r["status"] == 200 for r in rows)
    assert path.read_bytes() == before


@pytest.mark.slow
@NO_CN
@pytest.mark.parametrize(("provider", "model", "path", "key", "said"), [
    ("openai", "gpt-4o", "/v1/chat/completions", ("authorization", "Bearer sk-cn-user"), "Mock reply"),
    ("anthropic", "claude-sonnet-4-5", "/v1/messages", ("x-api-key", "sk-cn-user"), "All done.")])
def test_run_cn_completes_tagged_with_a_copy_of_its_config(user, provider, model, path, key, said):
    """Continue CLI headless (``-p --auto``) through ``run``: its model comes from a copy
    of the user's ``config.yaml`` pointed at the proxy, removed after the run; the user's
    file is byte-identical."""
    tmp = user.root / "tmp"
    tmp.mkdir()
    user.env.update(TMPDIR=str(tmp))
    config = ("# mine\nname: Local Config\nversion: 1.0.0\nschema: v1\nmodels:\n"
              f"  - name: main\n    provider: {provider}\n    model: {model}\n"
              "    apiKey: sk-cn-user\n    roles: [chat, edit]\n")
    saved, before = _saved(user, ".continue/config.yaml", config)
    # Messages answer with the script's text, Chat Completions with the mock's own
    mock = MockUpstream(script=[{"text": "All done."}])
    with mock:
        done = user.run("run", "--upstream", mock.url + "/v1", "cn", "-p", "--auto", ASK)
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        assert said in done.stdout and "this run:" in done.stderr
        keys = {r.headers.get(key[0]) for r in mock.received}
        rows = user.rows()
    assert keys == {key[1]}
    assert rows and {(r["agent"], r["project"], r["path"]) for r in rows} == {("cn", str(user.project), path)}
    assert all(r["status"] == 200 for r in rows)
    assert saved.read_bytes() == before
    assert not list(tmp.glob("context-engine-run-*"))  # the copy is gone
    for state in (user.home / ".continue").rglob("*.*"):  # cn's own sessions: no proxy in them
        assert "127.0.0.1" not in state.read_text() and "/_tag/" not in state.read_text()


def test_grok_base_url_and_its_own_upstream(tmp_path):
    assert launch("grok", ["-p", "hi"], BASE, {}) == launch("grok", ["-p", "hi"], BASE, {"GROK_BASE_URL": "x"})
    todo = launch("grok", ["-p", "hi"], BASE, {})
    assert todo.argv == ["grok", "-p", "hi"] and todo.env == {"GROK_BASE_URL": BASE + "/v1"} and not todo.files
    home = {"HOME": str(tmp_path)}
    assert own_upstream("grok", [], home) == XAI
    settings = tmp_path / ".grok" / "user-settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps({"baseURL": "https://openrouter.ai/api/v1"}))
    assert own_upstream("grok", [], home) == "https://openrouter.ai/api/v1"
    assert own_upstream("grok", [], home | {"GROK_BASE_URL": "http://127.0.0.1:11434/v1"}) == "http://127.0.0.1:11434/v1"
    settings.write_text("not json")
    assert own_upstream("grok", [], home) == XAI


def _home_config(tmp_path: Path, config: dict) -> dict[str, str]:
    path = tmp_path / ".continue" / "config.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    return {"HOME": str(tmp_path)}


def test_cn_gets_a_copy_with_openai_and_anthropic_models_pointed(tmp_path):
    given = {"name": "c", "version": "1", "schema": "v1", "rules": ["be brief"], "models": [
        {"name": "a", "provider": "anthropic", "model": "claude", "apiKey": "${{ secrets.K }}"},
        {"name": "o", "provider": "openai", "model": "gpt-4o", "apiBase": "https://e.invalid/v1"},
        {"name": "l", "provider": "ollama", "model": "qwen"}, {"uses": "anthropic/claude-sonnet"}]}
    environ = _home_config(tmp_path, given)
    todo = launch("cn", ["-p", "hi"], BASE, environ)
    assert todo.argv == ["sh", "-c", WRAPPER, "cn", "-p", "hi"] and todo.env == {}
    copy = json.loads(todo.files[VARIABLE])
    assert [m.get("apiBase") for m in copy["models"]] == [BASE + "/v1/", BASE + "/v1/", None, None]
    assert copy["rules"] == ["be brief"] and copy["models"][0]["apiKey"] == "${{ secrets.K }}"
    assert own_upstream("cn", [], environ) == ANTHROPIC  # the first chat model's API


def test_cn_config_flag_is_replaced_by_the_copy(tmp_path):
    mine = tmp_path / "project" / "my.yaml"
    mine.parent.mkdir()
    mine.write_text("models:\n  - {name: o, provider: openai, model: gpt-4o, roles: [chat]}\n")
    for args in (["--config", "my.yaml", "-p", "hi"], ["-p", "--config=./my.yaml", "hi"]):
        argv, files = continue_config(args, BASE, {"HOME": str(tmp_path)}, str(mine.parent))
        assert argv == ["sh", "-c", WRAPPER, "cn", "-p", "hi"]
        assert json.loads(files[VARIABLE])["models"][0]["apiBase"] == BASE + "/v1/"
    assert split_config(["--config", "a", "--config", "b.yaml", "x"]) == ("b.yaml", ["x"])
    slug = ["--config", "acme/agent", "-p", "hi"]  # a hub slug: its endpoints are the hub's
    assert continue_config(slug, BASE, {"HOME": str(tmp_path)}, str(tmp_path)) == (["cn", *slug], {})
    missing = ["--config", "none.yaml", "hi"]  # cn reports it itself
    assert continue_config(missing, BASE, {"HOME": str(tmp_path)}, str(tmp_path)) == (["cn", *missing], {})


def test_cn_without_a_config_gets_the_anthropic_model_cn_would_write(tmp_path):
    environ = {"HOME": str(tmp_path), "ANTHROPIC_API_KEY": "sk-a"}
    argv, files = continue_config(["-p", "hi"], BASE, environ, str(tmp_path))
    assert argv[:4] == ["sh", "-c", WRAPPER, "cn"]
    (model,) = json.loads(files[VARIABLE])["models"]
    assert (model["provider"], model["apiKey"], model["apiBase"]) == ("anthropic", "sk-a", BASE + "/v1/")
    assert own_upstream("cn", [], environ) == ANTHROPIC
    assert not (tmp_path / ".continue").exists()  # nothing written for the user
    assert continue_config(["hi"], BASE, {"HOME": str(tmp_path)}, str(tmp_path)) == (["cn", "hi"], {})
    assert own_upstream("cn", [], {"HOME": str(tmp_path)}) == OPENAI
    glob = tmp_path / "g"
    glob.mkdir()
    (glob / "config.yaml").write_text("models: [{provider: openai, model: m}]\n")
    argv, files = continue_config(["hi"], BASE, {"HOME": str(tmp_path), "CONTINUE_GLOBAL_DIR": str(glob)},
                                  str(tmp_path))
    assert json.loads(files[VARIABLE])["models"][0]["apiBase"] == BASE + "/v1/"
    (glob / "config.yaml").write_text("models: [unclosed\n")  # does not parse: cn says so itself
    assert continue_config(["hi"], BASE, {"CONTINUE_GLOBAL_DIR": str(glob)}, str(tmp_path)) == (["cn", "hi"], {})
