"""``bench/cold_memory.py`` end to end on one real LoCoMo case: a real proxy on loopback
with an empty store, then with the vectors the cold request left behind, evidence read
from what the loopback upstream received; and ``bench --cold``, every session on a
fresh store."""

import json

import pytest

from context_engine.bench.cli import main as bench_main
from context_engine.bench.cold_memory import main
from tests.conftest import needs_data

pytestmark = [pytest.mark.slow, needs_data("locomo_dev.jsonl")]


def test_cold_and_warm_requests_through_the_server(tmp_path, capsys):
    out = tmp_path / "cold.json"
    # no deadline: on a busy machine a rewrite past it would go out unchanged (the bench
    # counts that; this test checks the rewrite itself)
    assert main(["locomo", "--limit", "1", "--deadline-ms", "0", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    row = report["files"]["locomo"]["rows"][0]
    for mode in ("cold", "warm"):
        assert row[mode]["probes"] == 1 and row[mode]["kept"] in (0, 1)
        assert not row[mode]["failed_open"]
        assert row[mode]["tokens"] < row["tokens"] / 3  # retrieve dropped the old turns
    # ranking on the request (the default): the background stores no vector for a chat,
    # and a warm proxy sends what a cold one sends
    assert row["warm"]["vectors"] == row["cold"]["vectors"] == 0
    assert row["warm"]["tokens"] == row["cold"]["tokens"] and row["warm"]["kept"] == row["cold"]["kept"]
    summary = report["files"]["locomo"]["summary"]
    assert summary["cold"]["failed_open"] == 0 and summary["cold"]["reduction"] > 0.6


def test_bench_cold_gives_each_session_a_fresh_store(tmp_path):
    path = tmp_path / "b.json"
    assert bench_main(["locomo", "--limit", "2", "--systems", "engine", "--cold", "--json", str(path),
                       "--quiet"]) == 0
    report = json.loads(path.read_text())
    assert report["cold"] is True
    engine = report["files"]["locomo_dev.jsonl"]["systems"]["engine"]
    assert engine["probes"] == 2 and engine["reduction"]["o200k_base"] > 0.6
