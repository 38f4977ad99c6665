"""Docs that tests keep true: every registered rule in the rules table (docs/rules.md), every
option in config.yaml, the README's size, test command and generated results, no machine
paths, and the site built in strict mode."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from context_engine.proxy.settings import ALL_KEYS
from context_engine.rules import DEFAULT_RULES, REGISTRY
from tests.conftest import REPO


def _config() -> dict:
    return yaml.safe_load((REPO / "config.yaml").read_text())


def test_every_setting_is_in_config_yaml():
    assert set(ALL_KEYS) <= set(_config())


def _rules_table() -> str:
    return (REPO / "docs" / "rules.md").read_text().split("<!-- rules-table")[1].split("\n## ")[0]


def test_every_rule_is_in_the_rules_table():
    table = _rules_table()
    for name in REGISTRY:
        assert f"| `{name}` |" in table, f"{name} missing from the README rules table"


def test_every_rule_option_is_in_config_yaml():
    config = _config()
    assert list(config.get("rules") or {}) == list(REGISTRY)  # every rule, in run order
    for name, cls in REGISTRY.items():
        options = (config.get("rule_options") or {}).get(name) or {}
        for f in dataclasses.fields(cls.Config):
            assert f.name in options, f"rule_options.{name}.{f.name} missing from config.yaml"
            assert f.metadata.get("help"), f"{name}.{f.name} has no help line"


def test_default_rules_are_on_in_config_yaml():
    rules = _config().get("rules") or {}
    assert tuple(n for n, on in rules.items() if on) == DEFAULT_RULES


def test_every_rule_module_has_the_documented_sections():
    import importlib

    for name in REGISTRY:
        module = REGISTRY[name].__module__
        doc = importlib.import_module(module).__doc__ or ""
        for section in ("What it does", "Why", "Example", "Options", "Risks"):
            assert section in doc, f"{module} docstring lacks {section!r}"


def test_rules_table_says_which_rules_are_on_by_default():
    table = _rules_table()
    for name in REGISTRY:
        row = next(line for line in table.splitlines() if line.startswith(f"| `{name}` |"))
        default = row.split(" | ")[2].strip()
        expected = "on" if name in DEFAULT_RULES else "off"
        assert default.split(" ")[0].rstrip(":;,") == expected, f"{name}: README says {default!r}"


DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def test_readme_is_short_and_runs_the_ci_test_command():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    ci = (REPO / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1] == "python3 -m pytest -p no:cacheprovider" and "bash .ci/run" in readme
    assert "context-engine demo" in readme and "context-engine run claude" in readme


def test_docs_name_no_machine_paths():
    for path in DOCS:
        text = path.read_text()
        assert not re.search(r"/work/|/home/\w+/|/root/|\.lock\b", text), path.name


def test_readme_numbers_carry_their_date_and_come_from_the_json():
    from context_engine.bench import docs_page

    assert docs_page.main(["--check"]) == 0  # README block and benchmark page match the JSON
    block = (REPO / "README.md").read_text().split(docs_page.BEGIN)[1].split(docs_page.END)[0]
    rows = [line for line in block.strip().splitlines()[2:]]
    assert rows and all(re.search(r"\| 20\d\d-\d\d-\d\d \|", row) for row in rows)


def _readme_rows() -> list[str]:
    from context_engine.bench import docs_page

    block = (REPO / "README.md").read_text().split(docs_page.BEGIN)[1].split(docs_page.END)[0]
    return block.strip().splitlines()[2:]


def test_readme_headline_figures_are_what_the_bench_outputs_say():
    """Each README row that names a bench output shows that output's figures and date (read
    here on their own, not through the renderer); the others say they are transcribed."""
    results = json.loads((REPO / "docs" / "results" / "benchmarks.json").read_text())
    rows = _readme_rows()
    assert len(rows) == len(results["headline"])
    for h, row in zip(results["headline"], rows, strict=True):
        if "from" not in h:
            assert "transcribed, not regenerated" in row, row
            continue
        if h["from"] == "crossval":  # held out, one bench output per memory file
            for label, name in h["files"].items():
                cv = json.loads((REPO / "docs" / "results" / name).read_text())
                assert f"{label} {cv['crossval']['evidence']:.1%} at {cv['crossval']['reduction']:.1%}" \
                    in row, row
            continue
        report = json.loads((REPO / "docs" / "results" / h["file"]).read_text())
        date = report["_about"]["date"] if h["from"] == "load" else report["date"]
        assert f"| {date} |" in row, row
        if h["from"] == "load":
            proxy = report[h["phases"][0]]["added_ms_median_of_rounds"]
            assert f"{proxy['p50']:.1f} ms p50, {proxy['p95']:.0f} ms p95" in row, row
            assert f"{report['args']['sessions']} concurrent sessions" in row, row
            continue
        if h["from"] == "eval":
            f1 = report["f1"]
            assert f"{f1['diff']:.1f} points of token F1 [{f1['ci95'][0]:.1f}, " \
                   f"{f1['ci95'][1]:.1f}]" in row.replace("−", "-"), row
            assert f"{f1['questions']} questions" in row, row
            continue
        if h["from"] == "cold_memory":
            for data in h["data"]:
                cold = report["files"][data]["summary"]["cold"]
                assert f"{cold['evidence_share']:.1%} at {cold['reduction']:.1%}" in row, row
            continue
        s = report["files"][h["data"]]["systems"]["engine"]
        if h["from"] == "way_back":  # the bill with the agent's way back (bench/reread.py)
            back = {k: b["way_back"]["cost_vs_direct"] for k, b in s["replay"]["billing"].items()}
            assert f"{back['openai']:.3f}× direct (OpenAI), {back['anthropic']:.3f}× (Anthropic)" \
                in row, row
            continue
        if h["from"] == "bill":
            bills = s["replay"]["billing"]
            assert f"{bills['openai']['cost_vs_direct']:.3f}× direct (OpenAI), " \
                   f"{bills['anthropic']['cost_vs_direct']:.3f}× (Anthropic)" in row, row
            assert f"{s['requests']:,} requests" in row, row
        else:
            assert h["from"] == "evidence", h
            assert f"{s['retention']:.1%} ({s['retained']}/{s['probes']}) at " \
                   f"{s['reduction']['o200k_base']:.1%} fewer" in row, row


# what each generated table reads from its bench output (a file's first data file, first system)
NEEDED = {"single": ("reduction", "retained", "failed_open"), "apis": ("reduction", "probes"),
          "replay": ("replay", "retained_by_kind", "reduction"), "ab": ("replay",)}


def test_generated_tables_refuse_a_bench_output_missing_a_field(tmp_path, monkeypatch):
    from context_engine.bench import docs_format, docs_page

    placeholders = docs_page.GENERATED.findall(docs_page.TEMPLATE.read_text())
    assert {kind for kind, _ in placeholders} >= set(NEEDED)
    monkeypatch.setattr(docs_format, "DIR", tmp_path)
    for kind, names in placeholders:
        for name in names.split(","):
            (tmp_path / name).write_text((REPO / "docs" / "results" / name).read_text())
        docs_page.RENDERERS[kind](names.split(","))  # as committed: renders
        for field in NEEDED.get(kind, ()):
            first = names.split(",")[0]
            report = json.loads((REPO / "docs" / "results" / first).read_text())
            result = next(iter(report["files"].values()))
            engine = result["systems"].get("engine") or next(iter(result["systems"].values()))
            del engine[field]
            (tmp_path / first).write_text(json.dumps(report))
            with pytest.raises(KeyError):
                docs_page.RENDERERS[kind](names.split(","))
            (tmp_path / first).write_text((REPO / "docs" / "results" / first).read_text())


# the other generated tables: the field deleted from the first file each renders (an int
# is a position in a list, or the first key of a mapping)
DROPS = {"variants": ("files", 0, "systems", "engine", "tokens_after"),
         "crossval": ("crossval", "by_category"),
         "overhead": ("runs", 0, "passthrough", "added_p95_ms"),
         "replicas": ("phases", 1, "ledger_rows"),
         "stream_deltas": ("runs", 0, "other_caller_during_stream_s"),
         "embedders": ("speed", 0, "request_ms_p95")}


@pytest.mark.parametrize("kind", sorted(DROPS))
def test_generated_table_refuses_its_bench_output_missing_a_field(kind, tmp_path, monkeypatch):
    from context_engine.bench import docs_format, docs_page

    names = dict(docs_page.GENERATED.findall(docs_page.TEMPLATE.read_text()))[kind].split(",")
    monkeypatch.setattr(docs_format, "DIR", tmp_path)
    for name in names:
        (tmp_path / name).write_text((REPO / "docs" / "results" / name).read_text())
    assert docs_page.RENDERERS[kind](names).count("\n|") >= 2  # as committed: a table
    report = json.loads((REPO / "docs" / "results" / names[0]).read_text())
    *path, field = DROPS[kind]
    node = report
    for step in path:
        node = node[step] if not isinstance(step, int) or isinstance(node, list) \
            else node[list(node)[step]]
    del node[field]
    (tmp_path / names[0]).write_text(json.dumps(report))
    with pytest.raises(KeyError):
        docs_page.RENDERERS[kind](names)


def test_cold_memory_table_reports_locomo_by_conversation_adding_up_to_the_totals():
    """LoCoMo's cold and warm evidence per conversation (the unit a held-out check is made
    on) sums to the table's totals; LongMemEval's ids name no conversation: no line."""
    import re

    from context_engine.bench import docs_tables_latency

    text = docs_tables_latency.cold_memory(["cold_memory.json"])
    report = json.loads((REPO / "docs" / "results" / "cold_memory.json").read_text())
    (line,) = [x for x in text.splitlines() if "by conversation" in x]
    assert line.startswith("locomo by conversation")
    found = re.findall(r"(conv-\d+) (\d+) / (\d+) of (\d+)", line)
    assert len(found) == len({c for c, *_ in found}) >= 2
    summary = report["files"]["locomo"]["summary"]
    for mode, col in (("cold", 1), ("warm", 2)):
        kept, total = map(int, summary[mode]["evidence"].split("/"))
        assert sum(int(f[col]) for f in found) == kept
        assert sum(int(f[3]) for f in found) == total


def test_committed_bench_outputs_name_no_machine_paths():
    for path in sorted((REPO / "docs" / "results").glob("*.json")):
        assert not re.search(r"/tmp/|/work/|/home/\w+/|/root/|/var/", path.read_text()), path.name


def test_docs_links_point_at_pages_that_exist():
    for path in DOCS:
        base = path.parent
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text()):
            if not target.startswith(("http://", "https://", "mailto:")):
                assert (base / target).exists(), f"{path.name} links to missing {target}"


@pytest.mark.skipif(shutil.which("mkdocs") is None, reason="mkdocs not installed (the dev extra)")
def test_docs_build_in_strict_mode(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(tmp_path / "site")], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env={"PATH": "/usr/bin:/bin", "NO_MKDOCS_2_WARNING": "1",
                                            "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-3000:]


def test_readme_settings_table_shows_the_defaults():
    from context_engine.proxy.settings import Settings

    readme = (REPO / "README.md").read_text()
    rows = {line.split(" | ")[0].strip("| `"): line for line in readme.splitlines()
            if line.startswith("| `")}
    defaults = {f.name: f.default for f in dataclasses.fields(Settings)}
    for name in ("upstream", "mode", "ledger", "store"):
        assert f"`{defaults[name]}`" in rows[name], name
    assert rows["rules"].split(" | ")[1] == ", ".join(f"`{n}`" for n in DEFAULT_RULES)
