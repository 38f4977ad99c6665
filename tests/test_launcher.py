"""``context-engine run`` and ``stop``: each agent's overrides, the background proxy (start,
attach, stop), tagging, the bill printed on exit, and clear errors. The real agents'
runs are in tests/test_launcher_agents.py."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator

import pytest

from context_engine.proxy.cli import main
from context_engine.proxy.launcher.agents import CODEX_PROVIDER, launch
from context_engine.proxy.launcher.background import running, state_dir
from tests.launcher_env import User, make_user

BASE = "http://127.0.0.1:9/_tag/x/eA"


def test_claude_gets_the_base_url_without_v1_and_keeps_tool_search():
    plan = launch("claude", ["-p", "hi"], BASE, environ={})
    assert plan.argv[:2] == ["claude", "--settings"] and plan.argv[3:] == ["-p", "hi"]
    assert json.loads(plan.argv[2]) == {"env": {"ANTHROPIC_BASE_URL": BASE}}
    assert plan.env == {"ANTHROPIC_BASE_URL": BASE, "ENABLE_TOOL_SEARCH": "true"}
    mine = launch("claude", [], BASE, environ={"ENABLE_TOOL_SEARCH": "false"})
    assert "ENABLE_TOOL_SEARCH" not in mine.env  # the user's own choice stays


def test_codex_gets_a_provider_of_its_own_on_the_command_line():
    plan = launch("codex", ["exec", "go"], BASE, environ={})
    assert plan.env == {} and plan.argv[-2:] == ["exec", "go"]
    flags = dict(f.split("=", 1) for f in plan.argv[2:-2:2])
    assert plan.argv[1:-2:2] == ["-c"] * 6
    assert flags["model_provider"] == f'"{CODEX_PROVIDER}"'
    assert flags[f"model_providers.{CODEX_PROVIDER}.base_url"] == f'"{BASE}/v1"'
    assert flags[f"model_providers.{CODEX_PROVIDER}.wire_api"] == '"responses"'
    assert flags[f"model_providers.{CODEX_PROVIDER}.supports_websockets"] == "true"


@pytest.mark.parametrize("agent,variables", [
    ("aider", {"OPENAI_API_BASE": BASE + "/v1"}),
    ("goose", {"OPENAI_HOST": BASE, "OPENAI_BASE_PATH": "v1/chat/completions", "ANTHROPIC_HOST": BASE}),
    ("opencode", {"OPENAI_BASE_URL": BASE + "/v1", "ANTHROPIC_BASE_URL": BASE + "/v1"}),
])
def test_other_agents_get_environment_overrides(agent, variables):
    plan = launch(agent, ["--help"], BASE, environ={})
    assert plan.argv == [agent, "--help"]
    assert variables.items() <= plan.env.items()
    if agent == "opencode":
        assert BASE + "/v1" in plan.env["OPENCODE_CONFIG_CONTENT"]


def test_opencode_keeps_the_users_inline_config():
    mine = json.dumps({"model": "openai/gpt-5", "provider": {"openai": {"options": {"timeout": 5}}}})
    plan = launch("opencode", [], BASE, environ={"OPENCODE_CONFIG_CONTENT": mine})
    merged = json.loads(plan.env["OPENCODE_CONFIG_CONTENT"])
    assert merged["model"] == "openai/gpt-5"
    assert merged["provider"]["openai"]["options"] == {"timeout": 5, "baseURL": BASE + "/v1"}
    assert merged["provider"]["anthropic"]["options"] == {"baseURL": BASE + "/v1"}


def test_state_folder_follows_xdg_state_home(tmp_path):
    assert state_dir({"XDG_STATE_HOME": str(tmp_path)}) == tmp_path / "context-engine"
    assert str(state_dir({})).endswith("/.local/state/context-engine")


@pytest.mark.parametrize("argv,message", [
    (["run", "nosuchagent"], "unknown agent 'nosuchagent'"),
    (["run"], "name an agent"),
    (["run", "--"], "nothing to run after --"),
    (["run", "--upstream"], "--upstream needs a value"),
    (["run", "--upstream", "ftp://x", "claude"], "an http:// or https:// URL"),
    (["run", "--", "no-such-command-here"], "no-such-command-here is not installed"),
])
def test_bad_run_commands_say_what_is_wrong_without_a_traceback(argv, message, capsys, tmp_path,
                                                                monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not list(tmp_path.glob("context-engine/proxy-*.json"))  # no proxy started for it


# A command that talks to OPENAI_BASE_URL the way an SDK would, then waits for a file.
CLIENT = """
import os, sys, time, httpx
r = httpx.post(os.environ["OPENAI_BASE_URL"] + "/chat/completions", timeout=30,
               json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": sys.argv[1]}]})
print("status", r.status_code, flush=True)
while len(sys.argv) > 2 and not os.path.exists(sys.argv[2]):
    time.sleep(0.05)
"""


@pytest.fixture
def user(tmp_path) -> Iterator[User]:
    yield from make_user(tmp_path)


def _pid(stderr: str) -> str:
    line = next(x for x in stderr.splitlines() if "the proxy at" in x)
    return line.split("(pid ")[1].split(")")[0]


@pytest.mark.slow  # starts a proxy process: ~5 s on the 2-core box
def test_run_a_command_attach_a_second_and_stop(user, mock):
    upstream = mock.url + "/v1"
    go = user.root / "go"
    first = user.start("run", "--upstream", upstream, "--", sys.executable, "-c", CLIENT, "first", str(go))
    deadline = time.time() + 90
    while not list(user.state.glob("proxy-*.json")) or not mock.received:
        assert time.time() < deadline and first.poll() is None, first.communicate()
        time.sleep(0.1)
    second = user.run("run", "--upstream", upstream, "--", sys.executable, "-c", CLIENT, "second")
    go.touch()
    out, err = first.communicate(timeout=60)
    assert first.returncode == 0 and second.returncode == 0, err + second.stderr
    assert "status 200" in out and "status 200" in second.stdout
    assert "started the proxy" in err and "using the proxy" in second.stderr
    assert _pid(err) == _pid(second.stderr)  # one proxy for both runs
    assert "this run: 1 requests" in second.stderr and "context-engine report --by project" in second.stderr
    assert "Traceback" not in err + second.stderr
    status = user.run("status", "--once")
    assert status.returncode == 0 and "2 requests" in status.stdout and "python" in status.stdout
    rows = user.rows()  # stops the proxy
    tag = sys.executable.rsplit("/", 1)[-1]  # a command's agent tag: its program's name
    assert [(r["agent"], r["project"]) for r in rows] == [(tag, str(user.project))] * 2
    assert not list(user.state.glob("proxy-*.json")) and not running(user.state)
    assert "no proxy is running" in user.run("stop").stderr


def test_status_says_how_to_start_a_proxy_when_none_answers(capsys):
    from context_engine.proxy.launcher.background import free_port

    assert main(["status", "--once", "--url", f"http://127.0.0.1:{free_port()}"]) == 1
    out = capsys.readouterr().out
    assert "cannot read" in out and "context-engine run" in out and "Traceback" not in out


def test_status_once_prints_one_frame(start_proxy, capsys):
    import httpx

    from context_engine.proxy.edge.tags import tag_prefix

    proxy = start_proxy()
    httpx.post(proxy.url + tag_prefix("aider", "/p") + "/v1/chat/completions",
               json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]})
    assert main(["status", "--once", "--url", proxy.url]) == 0
    out = capsys.readouterr().out
    assert "1 sessions, 1 requests" in out and "aider" in out and "by agent" in out
