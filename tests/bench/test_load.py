"""``bench/load.py`` end to end at a tiny scale: the floor proxy, passthrough and the rules
behind the loopback mock, real server processes, real traces."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DATA, REPO, needs_data


@pytest.mark.slow
@needs_data("agent_traces_dev.jsonl")
def test_load_bench_runs_three_phases_in_rounds_without_errors(tmp_path):
    out = tmp_path / "load.json"
    env = {**os.environ, "CONTEXT_ENGINE_DATA": str(DATA), "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "bench/load.py", "--sessions", "3", "--turns", "2", "--delay", "0.05",
                    "--rounds", "2", "--data", str(Path(DATA) / "agent_traces_dev.jsonl"), "--json", str(out)],
                   cwd=REPO, env=env, check=True, capture_output=True, timeout=240)
    report = json.loads(out.read_text())
    for name in ("floor", "passthrough", "proxy"):
        phase = report[name]
        assert phase["requests"] == 6 and phase["proxy_failures"] == 0, phase
        assert phase["added_ms"]["p50"] is not None and phase["cpu_ms_per_request"] is not None
    for name in ("passthrough", "proxy"):  # every request of the round, and its two warm-ups, in its ledger
        assert report[name]["ledger_rows"] == report[name]["ledger_rows_expected"] == 8
        assert report[name]["server_ms_before_forward"]["p50"] is not None


@pytest.mark.slow
@needs_data("agent_traces_dev.jsonl", "locomo_dev.jsonl")
def test_load_bench_cold_mode_measures_bystanders_beside_the_passthrough(tmp_path):
    out = tmp_path / "cold.json"
    env = {**os.environ, "CONTEXT_ENGINE_DATA": str(DATA), "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "bench/load.py", "--cold", "1", "--delay", "0.1", "--json", str(out)],
                   cwd=REPO, env=env, check=True, capture_output=True, timeout=240)
    report = json.loads(out.read_text())
    assert "floor" not in report
    for name in ("passthrough", "proxy"):
        phase = report[name]
        assert phase["proxy_failures"] == 0, phase
        assert len(phase["cold_added_ms"]) == 1 and phase["cold_added_ms"][0] is not None
        assert phase["bystander_added_ms"]["p95"] is not None
        meanwhile = phase["bystander_meanwhile_added_ms"]
        assert meanwhile["n"] >= 1 and meanwhile["max"] >= meanwhile["p50"]
        assert phase["ledger_rows"] == phase["ledger_rows_expected"]


@pytest.mark.slow
@needs_data("agent_traces_dev.jsonl")
def test_load_bench_runs_each_phase_without_and_with_long_streams_and_hostile_callers(tmp_path):
    out = tmp_path / "extras.json"
    env = {**os.environ, "CONTEXT_ENGINE_DATA": str(DATA), "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "bench/load.py", "--phases", "floor,proxy", "--sessions", "2",
                    "--delay", "0.1", "--duration", "2", "--tool-result-kb", "4", "--rss-every", "0.5",
                    "--long-streams", "1", "--stream-chunks", "200", "--stream-seconds", "0.2", "--hostile-rps", "2",
                    "--hostile-scale", "0.01", "--data", str(Path(DATA) / "agent_traces_dev.jsonl"),
                    "--json", str(out)], cwd=REPO, env=env, check=True, capture_output=True, timeout=240)
    report = json.loads(out.read_text())
    assert [k for k in report if k not in ("args", "_about")] == [
        "floor", "floor+streams+hostile", "proxy", "proxy+streams+hostile"]
    about = report["_about"]  # what the docs page prints under the table
    assert about["command"].startswith("python3 bench/load.py --phases floor,proxy")
    assert str(out) not in about["command"] and about["date"]
    assert str(out) not in json.dumps(report)  # no path of the caller's machine in the report
    for name in ("floor", "proxy"):
        plain, loaded = report[name], report[name + "+streams+hostile"]
        assert plain["proxy_failures"] == loaded["proxy_failures"] == 0, (plain, loaded)
        assert "extras" not in plain and plain["rss_mb"]["trend"]["mb_per_min"] is not None
        extras = loaded["extras"]
        assert extras["streams_done"] >= 1 and extras["stream_errors"] == [], extras
        assert extras["stream_events_min"] == 200 + 3  # the role event, the deltas, stop, [DONE]
        assert extras["hostile_sent"] >= 2
        assert all(s.endswith(":401") for s in extras["hostile_statuses"]), extras
    assert report["proxy"]["ledger_rows"] == report["proxy"]["ledger_rows_expected"]
