"""``context-engine eval agent``: the paired statistics against known values, and the
harness end to end through the real CLI, real proxies on loopback, the built-in model
(a real HTTP server answering from what each request shows), the real openai SDK and
real subprocesses for the ``-- CMD`` adapter."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from context_engine.bench import eval_agent_stats as st
from context_engine.bench.eval_agent_arms import actions, repeats
from context_engine.bench.eval_agent_policy import decide
from context_engine.bench.eval_agent_tasks import builtin_tasks
from context_engine.proxy.cli import main

FAKE_COMMAND = Path(__file__).resolve().parents[1] / "fakes" / "agent_command.py"


# -- statistics, against values computed independently (SciPy / by hand) ---------------

def test_mcnemar_exact_is_twice_the_binomial_tail_of_the_discordant_pairs():
    assert st.mcnemar_exact(1, 6) == pytest.approx(0.125)  # 2 * (1 + 7) / 2**7
    assert st.mcnemar_exact(2, 10) == pytest.approx(2 * (1 + 12 + 66) / 4096)
    assert st.mcnemar_exact(0, 5) == pytest.approx(0.0625)
    assert st.mcnemar_exact(3, 3) == 1.0 and st.mcnemar_exact(0, 0) == 1.0
    assert st.mcnemar_exact(10, 2) == st.mcnemar_exact(2, 10)


def test_student_t_cdf_and_quantile_match_known_values():
    assert st.t_cdf(2.0, 10) == pytest.approx(0.963305982614630, abs=1e-12)
    assert st.t_cdf(-1.3, 3) == pytest.approx(0.142233754363948, abs=1e-12)
    assert st.t_cdf(0.0, 7) == pytest.approx(0.5)
    assert st.normal_cdf(1.959963984540054) == pytest.approx(0.975, abs=1e-12)


def test_tost_on_paired_values_matches_two_one_sided_t_tests():
    a = [1, 1, 1, 0, 1, 1, 0, 1, 1, 1]
    b = [1, 1, 0, 0, 1, 1, 1, 1, 1, 1]
    r = st.tost_paired(a, b, margin=0.3)
    assert r.difference == 0.0
    assert r.p == pytest.approx(0.037514743095464, abs=1e-9)  # scipy.stats.t, df 9
    assert r.interval == pytest.approx((-0.273264341856889, 0.273264341856889), abs=1e-6)
    assert r.equivalent and not st.tost_paired(a, b, margin=0.2).equivalent


def test_tost_on_paired_proportions_uses_the_agresti_min_interval():
    # 100 tasks: 85 solved in both arms, 5 only direct, 10 only through the proxy
    direct = [1] * 85 + [1] * 5 + [0] * 10
    proxy = [1] * 85 + [0] * 5 + [1] * 10
    r = st.tost_paired_proportions(direct, proxy, margin=0.1)
    assert r.difference == pytest.approx(0.05)
    assert r.p == pytest.approx(0.0950855732180913, abs=1e-9)  # scipy.stats.norm, by hand
    assert r.interval == pytest.approx((-0.014988492397206, 0.113027708083480), abs=1e-6)
    assert not r.equivalent and st.tost_paired_proportions(direct, proxy, margin=0.15).equivalent
    # no discordant pair proves nothing on six tasks, and a lot on five hundred
    assert not st.tost_paired_proportions([1] * 6, [1] * 6, margin=0.05).equivalent
    assert st.tost_paired_proportions([1] * 500, [1] * 500, margin=0.05).equivalent


def test_bootstrap_intervals_are_deterministic_and_contain_the_estimate():
    values = [0.1, 0.4, 0.35, 0.8, 0.2, 0.55, 0.6, 0.3]
    interval = st.mean_interval(values, seed=3)
    assert interval is not None
    lo, hi = interval
    assert lo < sum(values) / len(values) < hi
    assert st.mean_interval(values, seed=3) == (lo, hi) and st.mean_interval(values, seed=4) != (lo, hi)
    a, b = [1.0, 2.0, 3.0, 4.0], [2.0, 3.0, 4.0, 5.0]
    assert st.paired_difference(a, b) == (1.0, 1.0)  # every pair moved by exactly one
    cost, solved = [2.0, 4.0, 6.0, 8.0], [1.0, 1.0, 0.0, 1.0]
    ratio = st.ratio_interval(cost, solved)
    assert ratio is not None and ratio[0] <= 20 / 3 <= ratio[1]
    assert st.ratio_interval([1.0], [0.0]) is None  # never defined: no interval
    assert st.paired_ratio_interval(cost, solved, [c / 2 for c in cost], solved) == (0.5, 0.5)


# -- the built-in model and the re-read count -------------------------------------------

def test_the_built_in_model_reads_facts_only_from_the_request():
    task = builtin_tasks(2)[1]  # fix_constant: step 9 edits with the values of steps 1 and 5
    msgs: list[dict[str, Any]] = [{"role": "user", "content": f"[task {task.id}] {task.prompt}"}]
    for step in range(9):
        call = decide(task, msgs, ["read_file"])["tool_calls"][0]
        assert call["id"].startswith(f"s{step}_")
        path = json.loads(call["function"]["arguments"]).get("path", "")
        body = task.files.get(path, "src/app/limits.py:3: MAX_BATCH")
        if step == 1:
            body = "[context-engine:cleared] 210 lines of tool output; original: orig:1a2b3c4d5e6f"
        msgs += [{"role": "assistant", "content": None, "tool_calls": [call]},
                 {"role": "tool", "tool_call_id": call["id"], "content": body}]
    back = decide(task, msgs, ["read_file", "context_recall"])["tool_calls"]
    assert [c["function"]["name"] for c in back] == ["context_recall"]
    assert json.loads(back[0]["function"]["arguments"]) == {"id": "orig:1a2b3c4d5e6f"}
    again = decide(task, msgs, ["read_file"])["tool_calls"]  # no recall offered: a re-read
    assert again[0]["function"]["name"] == "read_file" and again[0]["id"].startswith("s1_")


def test_repeated_actions_are_counted_for_tool_calls_and_fenced_commands():
    call = {"id": "a", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "x"}'}}
    recall = {"id": "r", "type": "function", "function": {"name": "context_recall", "arguments": "{}"}}
    msgs = [{"role": "user", "content": "task"},
            {"role": "assistant", "tool_calls": [call, recall]}, {"role": "assistant", "tool_calls": [call, recall]},
            {"role": "assistant", "content": "Look:\n```bash\ncat a.py\n```"},
            {"role": "assistant", "content": "Again:\n```bash\ncat a.py\n```"},
            {"role": "assistant", "content": "```bash\nls\n```"}]
    key, acts = actions(msgs)
    assert repeats(acts) == 2 and len(acts) == 5  # recall calls are the proxy's, not re-reads
    assert actions([{"role": "user", "content": "other task"}])[0] != key


# -- end to end -------------------------------------------------------------------------

def _run(tmp_path: Path, *argv: str) -> tuple[int, dict[str, Any]]:
    n = len(list(tmp_path.glob("report*")))
    out = tmp_path / f"report{n}.json"
    code = main(["eval", "agent", "--quiet", "--out", str(tmp_path / f"run{n}"), "--json", str(out), *argv])
    return code, json.loads(out.read_text()) if out.exists() else {}


def test_builtin_ab_runs_both_arms_through_real_proxies_and_compact_fires(tmp_path, capsys):
    config = tmp_path / "config.yaml"
    config.write_text("log_level: warning\n")  # the defaults: compact, recall on
    code, report = _run(tmp_path, "--builtin", "3", "--config", str(config), "--margin", "0.05",
                        "--fail-unless-equivalent")
    assert code == 1  # three tasks cannot show equivalence: the gate fails, the report is written
    direct, proxy = report["arms"]["direct"], report["arms"]["proxy"]
    assert direct["solved"] == proxy["solved"] == 3
    assert proxy["rule_savings"]["compact"] > 0 and not any(direct["rule_savings"].values())
    assert proxy["recall_rounds"] > 0 and direct["recall_rounds"] == 0  # cleared facts came back
    assert proxy["prompt_tokens"] < direct["prompt_tokens"]
    assert direct["cost_per_solved"] > 0 and report["paired"]["cost_per_solved_ratio"] > 0
    assert proxy["cost_original_estimate"] > 0 and report["paired"]["estimate_over_direct"] > 0
    paired = report["paired"]
    assert paired["mcnemar_p"] == 1.0 and paired["solved_direct_only"] == paired["solved_proxy_only"] == 0
    assert not paired["tost"]["equivalent"]  # three tasks cannot show equivalence within 5 points
    orders = {tuple(t["order"]) for t in report["tasks"]}
    assert orders == {("direct", "proxy"), ("proxy", "direct")}  # interleaved, both first
    text = capsys.readouterr().out
    assert "verdict: solve rate +0.00" in text and "compact" in text and "McNemar p=1.000" in text


def test_without_recall_a_cleared_fact_costs_re_reads_turns_and_under_a_turn_cap_the_task(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("recall:\n  enabled: false\n")
    code, free = _run(tmp_path, "--builtin", "1", "--config", str(config))
    assert code == 0
    task = free["tasks"][0]["arms"]
    assert task["direct"]["solved"] and task["proxy"]["solved"]
    assert task["direct"]["rereads"] == 0 and task["proxy"]["rereads"] > 0  # counted by the tap
    assert task["proxy"]["recall_rounds"] == 0 and task["proxy"]["turns"] > task["direct"]["turns"]
    assert free["paired"]["rereads_difference"] > 0 and free["paired"]["turns_difference"] > 0
    # the direct arm needs 11 requests to write the file: with that cap the re-read turn sinks the task
    capped = ("--builtin", "1", "--config", str(config), "--max-turns", "11", "--seed", "1")
    report = _run(tmp_path, *capped)[1]
    task = report["tasks"][0]["arms"]
    assert task["direct"]["solved"] and not task["proxy"]["solved"] and task["proxy"]["stop"] == "max_turns"
    assert report["paired"]["solved_direct_only"] == 1 and report["paired"]["mcnemar_p"] == 1.0
    assert report["paired"]["solve_rate_difference"] == -1.0
    again = _run(tmp_path, *capped)[1]  # deterministic: the same figures on a second run
    for key in ("arms", "paired"):
        assert again[key] == report[key]


def test_builtin_tasks_run_against_a_real_upstream_with_the_given_key(tmp_path, mock):
    before = len(mock.received)
    code, report = _run(tmp_path, "--builtin", "1", "--upstream", mock.url + "/v1", "--api-key",
                        "sk-secret-eval-key", "--max-turns", "5")
    assert code == 0
    arms = report["tasks"][0]["arms"]
    assert [(arms[a]["turns"], arms[a]["solved"], arms[a]["stop"]) for a in ("direct", "proxy")] == [
        (2, False, "done")] * 2  # the mock calls a tool with the wrong arguments, then stops
    sent = mock.received[before:]
    assert len(sent) == 4 and all(r.headers["authorization"] == "Bearer sk-secret-eval-key" for r in sent)
    assert "sk-secret" not in report["command"] and "--api-key" not in report["command"]


def _write_tasks(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_command_adapter_runs_each_task_in_both_arms_with_the_arm_url(tmp_path, mock):
    tasks = _write_tasks(tmp_path / "tasks.jsonl", [
        {"instance_id": "t1", "want": "Mock reply", "sleep": 0, "base_url_env": ["MY_AGENT_URL"]},
        {"instance_id": "t2", "want": "not in any reply", "sleep": 0},
        {"instance_id": "t3", "want": "Mock reply", "sleep": 60, "timeout": 2}])
    check = (f"{sys.executable} -c \"import sys, pathlib; "
             f"sys.exit(0 if sys.argv[1] in pathlib.Path('answer.txt').read_text() else 1)\" {{want}}")
    before = len(mock.received)
    code, report = _run(tmp_path, "--tasks", str(tasks), "--upstream", mock.url + "/v1", "--timeout", "120",
                        "--check", check, "--", sys.executable, str(FAKE_COMMAND), "{task}", "--sleep", "{sleep}")
    assert code == 0
    by_id = {t["task"]: t["arms"] for t in report["tasks"]}
    assert [by_id["t1"][a]["solved"] for a in ("direct", "proxy")] == [True, True]
    assert [by_id["t2"][a]["solved"] for a in ("direct", "proxy")] == [False, False]
    assert [by_id["t3"][a]["stop"] for a in ("direct", "proxy")] == ["timeout", "timeout"]
    for arm in ("direct", "proxy"):  # the hung command was killed, not left behind
        pid = int((tmp_path / "run0" / "tasks" / arm / "t3" / "pid").read_text())
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert [by_id["t1"][a]["turns"] for a in ("direct", "proxy")] == [1, 1]  # from each arm's ledger
    assert by_id["t3"]["direct"]["turns"] == 0
    assert len(mock.received) - before == 4  # t1 and t2, each through both proxies
    seen = {arm: json.loads((tmp_path / "run0" / "tasks" / arm / "t1" / "seen.json").read_text())
            for arm in ("direct", "proxy")}
    assert seen["direct"]["base_url"] != seen["proxy"]["base_url"]
    for arm, s in seen.items():
        assert s["task"] == "t1" and s["arm"] == arm and s["line"]["want"] == "Mock reply"
        assert s["base_url"].startswith("http://127.0.0.1:") and s["base_url"].endswith("/v1")
        assert s["own"] == s["base_url"] and s["anthropic"] + "/v1" == s["base_url"]


def test_eval_agent_refuses_bad_options_and_task_files(tmp_path, capsys):
    assert main(["eval", "agent", "--tasks", "x.jsonl", "--", "true"]) == 2
    assert "--upstream" in capsys.readouterr().err
    assert main(["eval", "agent", "--margin", "1.5"]) == 2
    assert main(["eval", "agent", "--", "true"]) == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"instance_id": "a"}\nnot json\n')
    assert main(["eval", "agent", "--tasks", str(bad), "--upstream", "http://127.0.0.1:9/v1", "--", "true"]) == 2
    assert "bad.jsonl:2: not JSON" in capsys.readouterr().err
    bad.write_text('{"instance_id": "a"}\n{"instance_id": "a"}\n')
    assert main(["eval", "agent", "--tasks", str(bad), "--upstream", "http://127.0.0.1:9/v1", "--", "true"]) == 2
    assert "appears twice" in capsys.readouterr().err
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "ledger-direct.db").write_text("")
    assert main(["eval", "agent", "--out", str(tmp_path / "used")]) == 2  # an earlier run's folder
    assert "not empty" in capsys.readouterr().err


FAKE_HARNESS = '''import json, sys
args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
preds = json.load(open(args["--predictions_path"]))
ok = [p["instance_id"] for p in preds if "+fixed" in p["model_patch"]]
json.dump({"resolved_ids": ok}, open(f"{preds[0]['model_name_or_path']}.{args['--run_id']}.json", "w"))
'''


def test_swebench_check_turns_the_submitted_patch_into_a_prediction_and_reads_the_verdict(tmp_path):
    from context_engine.bench.eval_agent_swebench import main as check

    harness = tmp_path / "harness.py"
    harness.write_text(FAKE_HARNESS)
    verdicts = {}
    for name, patch in (("good", "diff --git a/x b/x\n+fixed\n"), ("bad", "diff --git a/x b/x\n+broken\n"),
                        ("none", "")):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "traj.json").write_text(json.dumps({"info": {"submission": patch, "exit_status": "Submitted"}}))
        verdicts[name] = check([str(folder / "traj.json"), "repo__x-1", "--harness",
                                f"{sys.executable} {harness}", "--run-id", f"r-{name}"])
    assert verdicts == {"good": 0, "bad": 1, "none": 1}
    preds = json.loads((tmp_path / "good" / "preds.json").read_text())
    assert preds == [{"instance_id": "repo__x-1", "model_name_or_path": "context-engine-eval",
                      "model_patch": "diff --git a/x b/x\n+fixed\n"}]
    assert not (tmp_path / "none" / "preds.json").exists()  # no patch: the harness never ran
