"""``context-engine run claude`` and ``run codex`` with the real CLIs against the loopback
mock (as tests/test_agents.py drives them: offline, no telemetry): the agent completes, the
ledger's rows carry agent and project, the user's config files are byte-identical
afterwards (also after Ctrl-C), and a run started while another runs shares its proxy.
Skipped, with the reason, when the CLI is not installed (.ci/run installs both)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from context_engine.proxy.demo.mock_upstream import MockUpstream
from tests.launcher_env import CLI, User, make_user

pytestmark = pytest.mark.slow  # real agent CLIs

SCRIPT = [{"shell": "seq 1 4000"}, {"shell": "echo step-two-done"}, {"shell": "ls"},
          {"text": "All done."}]
NO_CLAUDE = pytest.mark.skipif(shutil.which("claude") is None,
                               reason="Claude Code not installed (npm i -g @anthropic-ai/claude-code)")
NO_OPENCODE = pytest.mark.skipif(shutil.which("opencode") is None,
                                 reason="opencode not installed (npm i -g opencode-ai)")
NO_GEMINI = pytest.mark.skipif(shutil.which("gemini") is None,
                               reason="Gemini CLI not installed (npm i -g @google/gemini-cli)")
NO_AIDER = pytest.mark.skipif(shutil.which("aider") is None,
                              reason="aider not installed (pip install aider-chat, in its own venv)")
NO_CODEX = pytest.mark.skipif(shutil.which("codex") is None,
                              reason="Codex CLI not installed (npm i -g @openai/codex)")
CLAUDE = ["claude", "-p", "Count to 4000, then list the files.", "--allowedTools", "Bash"]
CODEX = ["codex", "exec", "-m", "gpt-5-codex", "--skip-git-repo-check", "--ephemeral",
         "--dangerously-bypass-approvals-and-sandbox", "Count to 4000, then list the files."]
OPENCODE = ["opencode", "run", "-m", "openai/gpt-5", "Count to 4000, then list the files."]
# opencode offline: no model list from models.dev, no update check, no LSP downloads
OPENCODE_QUIET = {"OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1",
                  "OPENCODE_DISABLE_LSP_DOWNLOAD": "1", "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1"}
# The user's own settings: the launcher must leave every byte as it was.
CONFIGS = {
    ".claude/settings.json": '{\n  "env": {"ANTHROPIC_BASE_URL": "https://example.invalid"},\n'
                             '  "permissions": {"allow": ["Bash(ls:*)"]}\n}\n',
    ".codex/config.toml": 'model = "gpt-5-codex"\nmodel_provider = "openai"\n'
                          "check_for_update_on_startup = false\n\n[analytics]\nenabled = false\n",
}


@pytest.fixture
def user(tmp_path) -> Iterator[User]:
    yield from make_user(tmp_path, ANTHROPIC_API_KEY="sk-ant-run-test", OPENAI_API_KEY="sk-run-test")


def _write_configs(user: User) -> dict[Path, bytes]:
    saved = {}
    for name, text in CONFIGS.items():
        path = user.home / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        saved[path] = path.read_bytes()
    return saved


def _unchanged(saved: dict[Path, bytes], user: User) -> None:
    for path, before in saved.items():
        assert path.read_bytes() == before, f"{path.name} changed"
    claude_state = user.home / ".claude.json"  # Claude Code's own state file: no proxy in it
    if claude_state.exists():
        assert "_tag" not in claude_state.read_text() and "127.0.0.1" not in claude_state.read_text()


def _completes(user: User, command: list[str], agent: str) -> None:
    saved = _write_configs(user)
    with MockUpstream(script=SCRIPT) as mock:
        config = user.root / "config.yaml"  # Codex cuts a command's output to ~10k chars itself
        config.write_text("rule_options:\n  tool_json:\n    max_chars: 4000\n")
        done = user.run("run", "--upstream", mock.url + "/v1", "--config", str(config), *command)
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        assert "All done." in done.stdout
        assert "this run:" in done.stderr and "Traceback" not in done.stderr
        rows = user.rows()
    assert len(rows) >= 3 and {(r["agent"], r["project"]) for r in rows} == {(agent, str(user.project))}
    assert all(r["status"] == 200 for r in rows)
    assert [r for r in rows if r["tokens_sent"] < r["tokens_original"]]  # the rules ran
    _unchanged(saved, user)


@NO_CLAUDE
def test_run_claude_completes_tagged_and_leaves_configs_alone(user):
    _completes(user, CLAUDE, "claude")


@NO_CODEX
def test_run_codex_completes_tagged_and_leaves_configs_alone(user):
    _completes(user, CODEX, "codex")


@NO_OPENCODE
def test_run_opencode_completes_tagged(user):
    """opencode (the AI SDK's OpenAI provider: the Responses API) through ``run``: its
    inline config points the provider at the proxy; a title request on a small model
    goes through it too."""
    user.env.update(OPENCODE_QUIET)
    _completes(user, OPENCODE, "opencode")


@NO_GEMINI
def test_run_gemini_completes_tagged(user):
    """Gemini CLI through ``run``: ``GOOGLE_GEMINI_BASE_URL`` points it at a proxy whose
    upstream is the API's root (Gemini's paths carry their version). The user's own
    settings (API-key auth, no telemetry) are theirs; ``run`` writes none."""
    user.env.update(GEMINI_API_KEY="gm-run-test", GEMINI_CLI_TRUST_WORKSPACE="true")
    settings = user.home / ".gemini" / "settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}},
                                    "privacy": {"usageStatisticsEnabled": False},
                                    "telemetry": {"enabled": False},
                                    "general": {"disableAutoUpdate": True, "disableUpdateNag": True}}))
    before = settings.read_bytes()
    with MockUpstream(script=SCRIPT) as mock:
        config = user.root / "config.yaml"
        config.write_text("rule_options:\n  tool_json:\n    max_chars: 4000\n")
        done = user.run("run", "--upstream", mock.url, "--config", str(config), "gemini",
                        "-m", "gemini-2.5-flash", "--yolo", "-p", "Count to 4000, then list the files.")
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        assert "All done." in done.stdout and "this run:" in done.stderr
        rows = user.rows()
    assert {(r["agent"], r["api"]) for r in rows} == {("gemini", "gemini")}
    assert all(r["status"] == 200 for r in rows)
    assert [r for r in rows if r["tokens_sent"] < r["tokens_original"]]  # the rules ran
    # Gemini CLI migrates its own settings file (new key names, pretty-printed); the proxy
    # is in no file: the auth choice stays the user's and no address was written
    after = json.loads(settings.read_text())
    assert after["security"] == json.loads(before)["security"]
    assert "127.0.0.1" not in settings.read_text() and "_tag" not in settings.read_text()


@NO_AIDER
def test_run_aider_answers_tagged(user):
    """aider (litellm, Chat Completions) through ``run``: one message, answered by the
    mock through the proxy. Not installed by .ci/run (a venv of ~100 packages); run by hand."""
    user.env.update(LITELLM_LOCAL_MODEL_COST_MAP="True")  # aider's litellm, offline
    with MockUpstream(script=[]) as mock:
        done = user.run("run", "--upstream", mock.url + "/v1", "aider", "--message", "Say hello.",
                        "--yes-always", "--no-git", "--model", "gpt-4o", "--no-check-update",
                        "--no-show-release-notes", "--analytics-disable", "--no-pretty")
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        assert "Mock reply" in done.stdout and "this run: 1 requests" in done.stderr
        rows = user.rows()
    assert [(r["agent"], r["status"], r["path"]) for r in rows] == [("aider", 200, "/v1/chat/completions")]


@NO_CLAUDE
def test_ctrl_c_ends_claude_and_leaves_configs_alone(user):
    saved = _write_configs(user)
    mock = MockUpstream(script=[{"shell": "sleep 120"}, {"text": "All done."}])
    with mock:
        run = user.start("run", "--upstream", mock.url + "/v1", *CLAUDE)
        deadline = time.time() + 120
        while mock.state.script_pos < 1:  # Claude Code is running the long command
            assert time.time() < deadline and run.poll() is None, run.communicate()
            time.sleep(0.1)
        time.sleep(1.0)
        run.send_signal(signal.SIGINT)
        out, err = run.communicate(timeout=60)
    # Claude Code cancels on SIGINT; in print mode it may then exit 0 or with a signal's
    # code, so the run's end is read from what it never did: finish the script
    assert "All done." not in out
    assert "this run:" in err and "Traceback" not in err
    _unchanged(saved, user)


@NO_CLAUDE
def test_a_second_run_attaches_to_the_running_proxy(user):
    with MockUpstream(script=SCRIPT) as mock:
        upstream = mock.url + "/v1"
        go = user.root / "go"
        first = user.start("run", "--upstream", upstream, "--", sys.executable, "-c",
                           "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.05)",
                           str(go))
        deadline = time.time() + 90
        while not list(user.state.glob("proxy-*.json")):
            assert time.time() < deadline and first.poll() is None, first.communicate()
            time.sleep(0.1)
        second = user.run("run", "--upstream", upstream, *CLAUDE)
        go.touch()
        _, err = first.communicate(timeout=60)
        assert second.returncode == 0 and "All done." in second.stdout, second.stderr[-2000:]
        pid = err.split("(pid ")[1].split(")")[0]
        assert "using the proxy at" in second.stderr and f"(pid {pid})" in second.stderr
        rows = user.rows()
    assert {r["agent"] for r in rows} == {"claude"}


@NO_CLAUDE
def test_a_crashed_run_leaves_configs_alone_and_the_proxy_for_the_next(user):
    saved = _write_configs(user)
    mock = MockUpstream(script=[{"shell": "sleep 120"}, {"text": "All done."}] + SCRIPT)
    with mock:
        upstream = mock.url + "/v1"
        crash = subprocess.Popen([*CLI, "run", "--upstream", upstream, *CLAUDE], env=user.env,
                                 cwd=user.project, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.time() + 120
        while len(mock.received) < 1 or not list(user.state.glob("proxy-*.json")):
            assert time.time() < deadline and crash.poll() is None
            time.sleep(0.1)
        os.killpg(crash.pid, signal.SIGKILL)  # the launcher and the agent die at once
        crash.wait(timeout=30)
        _unchanged(saved, user)
        mock.state.script_pos = 2  # the next run gets a fresh session of the script
        again = user.run("run", "--upstream", upstream, *CLAUDE)
        assert again.returncode == 0 and "All done." in again.stdout, again.stderr[-2000:]
        assert "using the proxy" in again.stderr  # the crash left the proxy and its state file
    _unchanged(saved, user)
