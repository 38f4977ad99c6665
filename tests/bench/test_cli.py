"""The bench end to end on a few real cases from ``<repo>/../shared/data``."""

import json

import pytest

from context_engine.bench.cases import DEV_FILES, load_cases
from context_engine.bench.cli import main
from tests.conftest import DATA, REPO
from tests.conftest import needs_data as _needs

needs_data = _needs(*DEV_FILES)


def _light_config(tmp_path):
    """The project's config with the static embedder (wordllama): these tests check the bench's
    wiring and determinism, and MiniLM would spend most of their time embedding LoCoMo."""
    text = (REPO / "config.yaml").read_text()
    assert 'embedder: "auto"' in text
    path = tmp_path / "config.yaml"
    path.write_text(text.replace('embedder: "auto"', 'embedder: "wordllama"', 1))
    return str(path)


def _without_latency(value):
    if isinstance(value, dict):
        return {k: _without_latency(v) for k, v in value.items()
                if "latency" not in k and k not in ("command", "date")}
    return value


@pytest.mark.slow
@needs_data
def test_bench_on_real_cases_is_deterministic(tmp_path, capsys):
    outs = []
    for run in ("a", "b"):
        path = tmp_path / f"{run}.json"
        # the baselines and the whole pipeline (each rule alone would embed LoCoMo again)
        argv = ["agent_traces", "locomo", "injections", "--limit", "3", "--json", str(path),
                "--config", _light_config(tmp_path),
                "--systems", "last_n,mask_observations,engine",
                "--markdown", str(tmp_path / "bench.md"), "--quiet"]
        assert main(argv) == 0
        outs.append(json.loads(path.read_text()))
    assert _without_latency(outs[0]) == _without_latency(outs[1])
    report = outs[0]
    assert list(report["files"]) == ["agent_traces_dev.jsonl", "locomo_dev.jsonl",
                                     "injections_dev.jsonl"]
    locomo = report["files"]["locomo_dev.jsonl"]["systems"]
    assert locomo["none"]["retention"] == 1.0 and locomo["none"]["reduction"]["o200k_base"] == 0
    assert locomo["last_n(12)"]["reduction"]["o200k_base"] > 0.9
    assert locomo["last_n(12)"]["retained"] < locomo["last_n(12)"]["probes"]
    for result in report["files"].values():
        for s in result["systems"].values():
            assert s["invalid"] == 0 and s["requests"] == 3
    assert "locomo_dev.jsonl: 3 cases" in capsys.readouterr().out
    assert "| locomo_dev.jsonl | last_n(12) |" in (tmp_path / "bench.md").read_text()


@pytest.mark.slow
@needs_data
def test_replay_on_real_cases(tmp_path):
    path = tmp_path / "replay.json"
    assert main(["agent_traces", "locomo", "--replay", "--limit", "1", "--config", _light_config(tmp_path), "--systems",
                 "last_n,mask_observations,engine", "--json", str(path), "--quiet"]) == 0
    report = json.loads(path.read_text())
    locomo = report["files"]["locomo_dev.jsonl"]
    conversation = load_cases(DATA / "locomo_dev.jsonl", limit=1)[0].messages
    assert locomo["systems"]["none"]["requests"] == sum(
        1 for m in conversation if m["role"] == "user")
    replay = locomo["systems"]["last_n(12)"]["replay"]
    assert replay["cost_vs_none"] < 1.0 and replay["full_prefix_share"] < 0.5
    assert locomo["systems"]["none"]["replay"]["full_prefix_share"] == 1.0
    assert locomo["systems"]["none"]["replay"]["latency_ms_at_turn"]["200"]["n"] == 1


def test_bad_arguments_fail_with_status_2(capsys):
    assert main(["no_such_file_here", "--quiet"]) == 2
    assert main(["--rules", "no_such_rule", "--quiet"]) == 2
    assert "unknown rule" in capsys.readouterr().err


@needs_data
def test_dev_files_are_found():
    assert all((DATA / name).is_file() for name in DEV_FILES)


def test_the_report_names_its_command_without_where_it_was_written():
    from context_engine.bench.cli import without_outputs

    argv = ["locomo", "--json", "/tmp/out.json", "--quiet", "--markdown=/tmp/b.md", "--replay"]
    assert without_outputs(argv) == ["locomo", "--quiet", "--replay"]
    assert without_outputs(["--store", "/tmp/s", "--png", "a.png"], ("--store",)) == ["--png", "a.png"]


@_needs("long_traces_dev.jsonl")
def test_text_actions_send_a_session_as_a_text_action_harness(tmp_path):
    from context_engine.bench.cases import Case, as_text_actions
    from context_engine.proxy.engine.sessions import observations, session_kind

    case = load_cases(DATA / "long_traces_dev.jsonl", limit=1, dedupe=True)[0]
    text = as_text_actions(case)
    assert text.tools is None and text.cuts == case.cuts and len(text.messages) == len(case.messages)
    assert not any(m.get("tool_calls") or m["role"] == "tool" for m in text.messages)
    for before, after in zip(case.messages, text.messages):
        for call in before.get("tool_calls") or ():
            assert json.loads(call["function"]["arguments"])["command"] in after["content"]
        if before["role"] == "tool":
            assert after == {"role": "user", "content": before["content"]}
    assert session_kind(text.messages) == "agent" and observations(text.messages)
    bare = Case("c", [{"role": "user", "content": "fix it"}, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]}])
    assert as_text_actions(bare).messages[1] == {"role": "assistant", "content": "```bash\nls\n```"}

    out = tmp_path / "text.json"
    assert main(["long_traces", "--replay", "--text-actions", "--limit", "1", "--systems", "engine",
                 "--json", str(out), "--quiet"]) == 0
    report = json.loads(out.read_text())
    assert report["text_actions"] is True
    engine = report["files"]["long_traces_dev.jsonl (text actions)"]["systems"]["engine"]
    assert engine["invalid"] == 0 and engine["retained_by_kind"]["task"][0] == engine["retained_by_kind"]["task"][1]
