"""Real agents through the proxy: Codex CLI (Responses API), Claude Code (Anthropic
Messages) and Gemini CLI (Gemini generateContent), each driven non-interactively for a short session of shell tool calls against
a scripted loopback mock. Everything stays on 127.0.0.1; telemetry and update checks
are off. Skipped, with the reason, when the agent is not installed (.ci/run installs it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from context_engine.proxy.demo.mock_upstream import MockUpstream, ServerThread
from context_engine.proxy.edge.app import create_app
from context_engine.proxy.engine.engine import Engine
from context_engine.proxy.recording.ledger import read_rows
from context_engine.proxy.settings import load_settings
from context_engine.proxy.store.stores import MemoryStore

pytestmark = pytest.mark.slow  # real agent CLIs

# The first output is long: tool_json clips it (over max_chars), so the ledger shows a rewrite.
SCRIPT = [{"shell": "seq 1 4000"}, {"shell": "echo step-two-done"}, {"shell": "ls"},
          {"text": "All done."}]


# Codex cuts a command's output to ~10k chars itself
OPTIONS: dict[str, Any] = {"tool_json": {"max_chars": 4000}}


def agent_stack(tmp_path: Path, base: str, script: list[dict[str, Any]] = SCRIPT,
                rules: str = "fold_duplicates,tool_json,budget",
                options: dict[str, Any] = OPTIONS) -> Iterator[tuple[MockUpstream, ServerThread, Any]]:
    """The scripted mock and a proxy in front of it (``base``: the upstream's path)."""
    mock = MockUpstream(script=script)
    with mock:
        settings = load_settings(flags={"store": "memory://", "ledger": str(tmp_path / "ledger.db"),
                                        "rules": rules, "rule_options": options,
                                        "rules_deadline_ms": 0, "upstream": mock.url + base},
                                 env={}, config_path=os.devnull)
        app = create_app(settings, engine=Engine(settings, store=MemoryStore()))
        with ServerThread(app) as proxy:
            yield mock, proxy, app


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[MockUpstream, ServerThread, Any]]:
    yield from agent_stack(tmp_path, "/v1")


@pytest.fixture
def root_stack(tmp_path: Path) -> Iterator[tuple[MockUpstream, ServerThread, Any]]:
    """Upstream at the host's root: Gemini's paths carry their version."""
    yield from agent_stack(tmp_path, "")


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TERM", "TMPDIR")}
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {**keep, "HOME": str(home), "NO_COLOR": "1", **extra}


def _run(cmd: list[str], env: dict[str, str], cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, env=env, cwd=cwd, input=stdin, capture_output=True, text=True,
                          timeout=240)


def _rows(app: Any, api: str) -> list[dict[str, Any]]:
    deadline = time.time() + 20
    while app.state.finisher.unfinished and time.time() < deadline:
        time.sleep(0.01)
    app.state.ledger.flush()
    return [r for r in read_rows(app.state.ledger.path) if r["api"] == api]


def _check_session(mock: MockUpstream, app: Any, path: str, api: str) -> list[dict[str, Any]]:
    turns = [r for r in mock.received if r.path == path and b'"tools"' in r.body]
    assert len(turns) >= 3 and mock.state.script_pos >= 4
    rows = _rows(app, api)
    assert len(rows) >= 3 and all(r["status"] == 200 and not r["failed_open"] for r in rows)
    rewritten = [r for r in rows if r["tokens_sent"] < r["tokens_original"]]
    assert rewritten and json.loads(rewritten[-1]["rule_savings"])["tool_json"] > 0
    return [t.json() for t in turns]


def codex_config(tmp_path: Path, proxy_url: str) -> Path:
    """A ``CODEX_HOME`` whose provider is the proxy (Responses API, key from CE_TEST_KEY),
    with updates, plugins and analytics off: nothing leaves the loopback."""
    codex_home = tmp_path / "codex"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text(f"""
model = "gpt-5-codex"
model_provider = "ce"
check_for_update_on_startup = false

[model_providers.ce]
name = "Context Engine"
base_url = "{proxy_url}/v1"
wire_api = "responses"
env_key = "CE_TEST_KEY"

[features]
plugins = false

[analytics]
enabled = false
""")
    return codex_home


@pytest.mark.skipif(shutil.which("codex") is None, reason="Codex CLI not installed (npm i -g @openai/codex)")
def test_codex_cli_session_through_the_proxy(stack, tmp_path):
    mock, proxy, app = stack
    codex_home = codex_config(tmp_path, proxy.url)
    work = tmp_path / "work"
    work.mkdir()
    env = _env(tmp_path, CODEX_HOME=str(codex_home), CE_TEST_KEY="sk-codex-test")
    done = _run(["codex", "exec", "--skip-git-repo-check", "--ephemeral",
                 "--dangerously-bypass-approvals-and-sandbox", "Count to 4000, then list the files."],
                env, work)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "All done." in done.stdout
    bodies = _check_session(mock, app, "/v1/responses", "responses")
    assert mock.received[-1].headers["authorization"] == "Bearer sk-codex-test"
    # the reasoning items the mock sent come back, encrypted_content intact
    last = bodies[-1]["input"]
    reasoning = [i for i in last if i.get("type") == "reasoning"]
    assert len(reasoning) >= 3 and all(i["encrypted_content"].startswith("gAAAAAB") for i in reasoning)
    outputs = [i["output"] for i in last if i.get("type") == "function_call_output"]
    assert "step-two-done" in outputs[1] and "middle of" in outputs[0]


@pytest.mark.skipif(shutil.which("claude") is None,
                    reason="Claude Code not installed (npm i -g @anthropic-ai/claude-code)")
def test_claude_code_session_through_the_proxy(stack, tmp_path):
    mock, proxy, app = stack
    work = tmp_path / "work"
    work.mkdir()
    env = _env(tmp_path, ANTHROPIC_BASE_URL=proxy.url, ANTHROPIC_API_KEY="sk-ant-cc-test",
               CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_TELEMETRY="1",
               DISABLE_AUTOUPDATER="1", DISABLE_ERROR_REPORTING="1", CLAUDE_CODE_MAX_RETRIES="0")
    done = _run(["claude", "-p", "--allowedTools", "Bash"], env, work,
                stdin="Count to 4000, then list the files.")
    assert done.returncode == 0, (done.stdout + done.stderr)[-2000:]
    assert "All done." in done.stdout
    bodies = _check_session(mock, app, "/v1/messages", "anthropic")
    assert mock.received[-1].headers["x-api-key"] == "sk-ant-cc-test"
    blocks = [b for m in bodies[-1]["messages"] if isinstance(m["content"], list) for b in m["content"]]
    signed = [b for b in blocks if b["type"] == "thinking"]
    assert len(signed) >= 3 and all(b["signature"].startswith("Eq") for b in signed)
    results = [b for b in blocks if b["type"] == "tool_result"]
    assert len(results) >= 3 and "step-two-done" in json.dumps(results[1])


def gemini_env(tmp_path: Path, proxy_url: str) -> dict[str, str]:
    """The Gemini CLI's environment and settings: an API key against the proxy, the
    workspace trusted, telemetry and update checks off."""
    env = _env(tmp_path, GEMINI_API_KEY="gm-cli-test", GOOGLE_GEMINI_BASE_URL=proxy_url,
               GEMINI_CLI_TRUST_WORKSPACE="true")
    settings = {"security": {"auth": {"selectedType": "gemini-api-key"}},
                "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False},
                "general": {"disableAutoUpdate": True, "disableUpdateNag": True}}
    (Path(env["HOME"]) / ".gemini").mkdir()
    (Path(env["HOME"]) / ".gemini" / "settings.json").write_text(json.dumps(settings))
    return env


@pytest.mark.skipif(shutil.which("gemini") is None,
                    reason="Gemini CLI not installed (npm i -g @google/gemini-cli)")
def test_gemini_cli_session_through_the_proxy(root_stack, tmp_path):
    mock, proxy, app = root_stack
    work = tmp_path / "work"
    work.mkdir()
    env = gemini_env(tmp_path, proxy.url)
    # a named model: "auto" would first ask a classifier model for JSON the mock does not write
    done = _run(["gemini", "-m", "gemini-2.5-flash", "--yolo", "-p", "Count to 4000, then list the files."],
                env, work, stdin="")
    assert done.returncode == 0, (done.stdout + done.stderr)[-2000:]
    assert "All done." in done.stdout
    bodies = _check_session(mock, app, "/v1beta/models/gemini-2.5-flash:streamGenerateContent", "gemini")
    assert mock.received[-1].headers["x-goog-api-key"] == "gm-cli-test"
    parts = [p for c in bodies[-1]["contents"] for p in c["parts"]]
    calls = [p for p in parts if "functionCall" in p]
    assert len(calls) >= 3 and all("thoughtSignature" in p for p in calls)  # the CLI's, kept
    outputs = [p["functionResponse"]["response"]["output"] for p in parts if "functionResponse" in p]
    assert "step-two-done" in outputs[1] and "middle of" in outputs[0]
