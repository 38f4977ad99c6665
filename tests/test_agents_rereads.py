"""Real agents re-reading a file ``compact`` cleared: Codex CLI (Responses API), Claude
Code (Anthropic Messages) and Gemini CLI (generateContent) ``cat`` a file, run enough output that a compaction epoch clears
it (a low ``trigger_tokens``), then ``cat`` it again; the ledger row of the next request
counts one re-read attributed to ``compact``. Offline against the scripted loopback mock;
skipped, with the reason, when the agent is not installed."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from context_engine.proxy.demo.mock_upstream import MockUpstream, ServerThread
from tests.test_agents import _env, _rows, _run, agent_stack, codex_config, gemini_env

pytestmark = pytest.mark.slow  # real agent CLIs

FILE = "\n".join(f"line {i}: config_key_{i} = value_{i * 7 % 101}" for i in range(300))
SCRIPT = [{"shell": "cat notes.txt"}, {"shell": "seq 1 400"}, {"shell": "seq 401 800"},
          {"shell": "cat notes.txt"}, {"text": "All done."}]
COMPACT = {"compact": {"trigger_tokens": 2000, "clear_at_least": 300, "keep_recent": 1,
                       "keep_prose": 1, "keep_related": 0, "min_item_tokens": 20,
                       "cache_ttl": 0.001}}  # the cache taken as cold: an epoch fires at once


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[MockUpstream, ServerThread, Any]]:
    yield from agent_stack(tmp_path, "/v1", SCRIPT, "compact", COMPACT)


@pytest.fixture
def root_stack(tmp_path: Path) -> Iterator[tuple[MockUpstream, ServerThread, Any]]:
    """Upstream at the host's root: Gemini's paths carry their version."""
    yield from agent_stack(tmp_path, "", SCRIPT, "compact", COMPACT)


def workdir(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text(FILE)
    return work


def check_reread(mock: MockUpstream, app: Any, api: str) -> None:
    assert mock.state.script_pos >= 5, "the agent did not run the whole script"
    rows = _rows(app, api)
    assert any(r["tokens_sent"] < r["tokens_original"] for r in rows), "compact never cleared"
    (row,) = [r for r in rows if r["rereads"]]
    assert row["rereads"] == 1 and json.loads(row["reread_rules"]) == {"compact": [1, row["reread_tokens"]]}
    assert row["reread_tokens"] > 1000 and row["reread_turns"] == 3
    assert sum(r["repeat_reads"] for r in rows) == 0


@pytest.mark.skipif(shutil.which("codex") is None, reason="Codex CLI not installed (npm i -g @openai/codex)")
def test_codex_rereading_a_cleared_file_is_detected(stack, tmp_path):
    mock, proxy, app = stack
    codex_home = codex_config(tmp_path, proxy.url)
    env = _env(tmp_path, CODEX_HOME=str(codex_home), CE_TEST_KEY="sk-codex-test")
    done = _run(["codex", "exec", "--skip-git-repo-check", "--ephemeral",
                 "--dangerously-bypass-approvals-and-sandbox", "Read notes.txt twice."],
                env, workdir(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    check_reread(mock, app, "responses")


@pytest.mark.skipif(shutil.which("claude") is None,
                    reason="Claude Code not installed (npm i -g @anthropic-ai/claude-code)")
def test_claude_code_rereading_a_cleared_file_is_detected(stack, tmp_path):
    mock, proxy, app = stack
    env = _env(tmp_path, ANTHROPIC_BASE_URL=proxy.url, ANTHROPIC_API_KEY="sk-ant-cc-test",
               CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_TELEMETRY="1",
               DISABLE_AUTOUPDATER="1", DISABLE_ERROR_REPORTING="1", CLAUDE_CODE_MAX_RETRIES="0")
    done = _run(["claude", "-p", "--allowedTools", "Bash"], env, workdir(tmp_path),
                stdin="Read notes.txt twice.")
    assert done.returncode == 0, (done.stdout + done.stderr)[-2000:]
    check_reread(mock, app, "anthropic")


@pytest.mark.skipif(shutil.which("gemini") is None,
                    reason="Gemini CLI not installed (npm i -g @google/gemini-cli)")
def test_gemini_cli_rereading_a_cleared_file_is_detected(root_stack, tmp_path):
    mock, proxy, app = root_stack
    env = gemini_env(tmp_path, proxy.url)
    done = _run(["gemini", "-m", "gemini-2.5-flash", "--yolo", "-p", "Read notes.txt twice."],
                env, workdir(tmp_path), stdin="")
    assert done.returncode == 0, (done.stdout + done.stderr)[-2000:]
    check_reread(mock, app, "gemini")
