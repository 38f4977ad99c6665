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
def test_load_bench_runs_three_phases_without_errors(tmp_path):
    out = tmp_path / "load.json"
    env = {**os.environ, "CONTEXT_ENGINE_DATA": str(DATA), "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "bench/load.py", "--sessions", "3", "--turns", "2", "--delay", "0.05",
                    "--data", str(Path(DATA) / "agent_traces_dev.jsonl"), "--json", str(out)],
                   cwd=REPO, env=env, check=True, capture_output=True, timeout=240)
    report = json.loads(out.read_text())
    for name in ("floor", "passthrough", "proxy"):
        phase = report[name]
        assert phase["requests"] == 6 and phase["proxy_failures"] == 0, phase
        assert phase["added_ms"]["p50"] is not None and phase["cpu_ms_per_request"] is not None
    for name in ("passthrough", "proxy"):  # every request, and the two warm-ups, in the ledger
        assert report[name]["ledger_rows"] == report[name]["ledger_rows_expected"] == 8
        assert report[name]["server_ms_before_forward"]["p50"] is not None
