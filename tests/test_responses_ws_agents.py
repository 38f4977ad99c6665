"""``context-engine run codex`` over the Responses WebSocket: the real Codex CLI (offline,
as tests/test_launcher_agents.py drives it) against the loopback mock's WebSocket side.
Skipped, with the reason, when Codex is not installed (.ci/run installs it)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator

import pytest

from context_engine.proxy.demo.mock_ws import MockWsUpstream
from tests.launcher_env import User, make_user
from tests.test_responses_ws import ws_messages

SCRIPT = [{"shell": "seq 1 4000"}, {"shell": "echo step-two-done"}, {"shell": "ls"},
          {"text": "All done."}]


@pytest.fixture
def user(tmp_path) -> Iterator[User]:
    yield from make_user(tmp_path, OPENAI_API_KEY="sk-run-test")


@pytest.mark.slow  # a real agent CLI
@pytest.mark.skipif(shutil.which("codex") is None, reason="Codex CLI not installed (npm i -g @openai/codex)")
def test_run_codex_speaks_websocket_through_the_proxy(user):
    """``context-engine run codex``: Codex's provider ``supports_websockets``, so every
    turn of its run goes up the socket (none over HTTP), and each is a ledger row."""
    (user.home / ".codex").mkdir()
    (user.home / ".codex" / "config.toml").write_text(
        'check_for_update_on_startup = false\n\n[analytics]\nenabled = false\n')
    mock = MockWsUpstream(script=SCRIPT)
    with mock:
        config = user.root / "config.yaml"  # Codex cuts a command's output to ~10k chars itself
        config.write_text("rule_options:\n  tool_json:\n    max_chars: 4000\n")
        done = user.run("run", "--upstream", mock.url + "/v1", "--config", str(config), "codex", "exec",
                        "-m", "gpt-5-codex", "--skip-git-repo-check", "--ephemeral",
                        "--dangerously-bypass-approvals-and-sandbox", "Count to 4000, then list the files.")
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        assert "All done." in done.stdout
        every = user.rows()
    turns = [json.loads(m) for m in ws_messages(mock)]
    assert not [r for r in mock.received if r.method == "POST" and r.path.endswith("/responses")]
    assert mock.state.script_pos >= 4 and len(turns) >= 4
    assert [t["type"] for t in turns] == ["response.create"] * len(turns)
    assert [t.get("previous_response_id") for t in turns[1:]] == [f"resp_ws_{n}" for n in range(1, len(turns))]
    assert len(every) == len(turns) and all(r["status"] == 200 for r in every)
    assert {(r["agent"], r["api"], r["path"]) for r in every} == {("codex", "responses", "/v1/responses")}
    assert [r for r in every if r["tokens_sent"] < r["tokens_original"]]  # the rules ran
    assert all(r["prompt_tokens"] for r in every if r["completion_tokens"])  # usage per turn
