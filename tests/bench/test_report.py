import asyncio

from rich.console import Console

from context_engine.bench.report import markdown, print_report
from context_engine.bench.runner import run_replay, run_single, summarize
from context_engine.bench.systems import build_systems, engine_settings
from context_engine.proxy.engine.tokens import TokenCounter
from tests.bench.conftest import TEST_REGISTRY
from tests.bench.test_runner import _case


def _report(mode):
    settings = engine_settings("drop_marked", registry=TEST_REGISTRY)
    systems = build_systems(settings, kinds=("last_n", "engine"), registry=TEST_REGISTRY)
    counters = [TokenCounter("o200k_base"), TokenCounter("cl100k_base")]
    if mode == "replay":
        tallies = asyncio.run(run_replay([_case()], systems, counters[0], 0.1))
    else:
        tallies = asyncio.run(run_single([_case()], systems, counters))
    return {"command": "context-engine bench x", "mode": mode, "rules": ["drop_marked"],
            "cache_ratio": 0.1, "files": {"x.jsonl [test]": {"cases": 1,
                                                               "systems": summarize(tallies)}}}


def _printed(report):
    console = Console(record=True, width=200)
    print_report(report, console)
    return console.export_text()


def test_tables_show_titles_with_brackets_the_rules_and_per_rule_savings():
    text = _printed(_report("single"))
    assert "x.jsonl [test]: 1 cases, one request each" in text
    assert "engine = drop_marked" in text
    assert "tokens saved per rule" in text and "drop_marked" in text
    assert "50.0% (1/2)" in text  # the engine dropped the message one probe needs


def test_replay_table_and_markdown():
    report = _report("replay")
    text = _printed(report)
    assert "cache read at 0.1x" in text and "cost vs none" in text
    md = markdown(report)
    assert md.startswith("`context-engine bench x`")
    assert "| x.jsonl [test] | none | 0.0% | " in md and "| 1.00x |" in md
