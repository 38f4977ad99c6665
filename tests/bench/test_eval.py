"""``context-engine eval`` end to end: the real CLI, the server's rewrite path in process,
and a real HTTP model on loopback (``context_engine.bench.eval_mock``) that answers only from what the
request shows."""

import asyncio
import json
from typing import Any

import pytest

from context_engine.bench.cases import Case, Probe, load_cases, resolve_file
from context_engine.bench.eval_cli import _spread
from context_engine.bench.eval_cli import main as eval_main
from context_engine.bench.eval_client import CACHE_FILE, AnswerCache, ChatClient
from context_engine.bench.eval_mock import UNKNOWN, EvalMock, Reader
from context_engine.bench.eval_run import ASK, Options, chat_body, questions_of
from context_engine.bench.eval_score import (
    best_f1,
    judge_prompt,
    judge_verdict,
    normalize,
    paired_bootstrap,
    strip_reasoning,
    token_f1,
)
from context_engine.bench.metrics import probe_retained, visible_text
from context_engine.bench.systems import EngineSystem, engine_settings
from context_engine.proxy.cli import main
from tests.bench.conftest import TEST_REGISTRY, agent_messages
from tests.conftest import needs_data


def test_token_f1_uses_squad_normalisation():
    assert normalize("The  Eiffel-Tower, in Paris!") == "eiffeltower in paris"
    assert token_f1("the Sweden.", "Sweden") == 1.0
    assert token_f1("She moved from Sweden", "Sweden") == pytest.approx(2 * 0.25 / 1.25)
    assert token_f1("Norway", "Sweden") == 0.0
    assert token_f1("", "") == 1.0 and token_f1("", "x") == 0.0
    assert strip_reasoning("<think>hmm, Sweden?</think> Norway") == "Norway"
    assert strip_reasoning("<think>cut off by max_tokens") == ""


def test_judge_verdict_takes_the_last_label():
    assert judge_verdict("CORRECT") == 1.0 and judge_verdict("wrong.") == 0.0
    assert judge_verdict("Not WRONG at all: CORRECT") == 1.0
    assert judge_verdict("<think>CORRECT?</think> WRONG") == 0.0
    assert judge_verdict("I cannot tell") is None


def test_paired_bootstrap_is_seeded_and_brackets_the_mean():
    a = [1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0]
    b = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0]
    first, again = paired_bootstrap(a, b, seed=3), paired_bootstrap(a, b, seed=3)
    assert first == again and first["diff"] == -0.25
    low, high = first["low"], first["high"]
    assert low is not None and high is not None and low < -0.25 < high <= 0.0
    assert paired_bootstrap([1.0] * 5, [1.0] * 5) == {"diff": 0.0, "low": 0.0, "high": 0.0}
    with pytest.raises(ValueError):
        paired_bootstrap([1.0], [])


def test_answer_cache_survives_a_line_cut_off_by_an_interruption(tmp_path):
    (tmp_path / CACHE_FILE).write_text('{"key": "a", "text": "Sweden", "usage": null}\n{"key": "b", "te')
    cache = AnswerCache(str(tmp_path))
    hit = cache.get("a")
    assert hit is not None and hit.text == "Sweden" and hit.cached
    assert cache.get("b") is None


def _tiny_cases():
    """Two agent conversations; the gate's evidence sits in a message ``drop_marked`` drops."""
    messages = agent_messages()
    messages[4] = {"role": "assistant", "content": "DROP-ME note: boarding closes at 21:40."}
    return [
        Case("tiny/1", messages, (Probe("When does boarding close?", "21:40", ("21:40",)),
                                  Probe("Which flight is booked?", "LH 400", ("LH 400",))),
             meta={"dataset": "tiny"}),
        Case("tiny/2", messages[:4] + [messages[4]], (Probe("When does boarding close?", "21:40",
                                                             ("21:40",)),), meta={"dataset": "tiny"}),
    ]


def _write(cases, path):
    path.write_text("".join(json.dumps({"id": c.id, "messages": c.messages, "meta": c.meta,
                                        "probes": [{"question": p.question, "answer": p.answer,
                                                    "evidence": list(p.evidence)} for p in c.probes]})
                            + "\n" for c in cases))
    return str(path)


def test_questions_are_appended_to_traces_and_reused_from_locomo_cases():
    cases = _tiny_cases()
    qs = questions_of(cases)
    assert [q.id for q in qs] == ["tiny/1#0", "tiny/1#1", "tiny/2"]
    assert qs[0].messages[-1] == {"role": "user", "content": "When does boarding close?" + ASK}
    asked = Case("l/1", [{"role": "user", "content": "Where?"}], (Probe("Where?", "Paris", ()),))
    assert questions_of([asked])[0].messages == asked.messages
    either = Case("t/1", asked.messages, (Probe("Which value?", "98800", ("98800",)),
                                         Probe("Which value?", "a@b.nc", ("a@b.nc",))))
    (q,) = questions_of([either])
    assert q.id == "t/1" and q.golds == ("98800", "a@b.nc")
    assert best_f1("a@b.nc", q.golds) == 1.0 and best_f1("", q.golds) == 0.0


def test_sample_spreads_cases_through_the_file():
    ten: list[Any] = list(range(10))  # stand-ins for cases: only the order matters
    two: list[Any] = [0, 1]
    seven: list[Any] = [7]
    assert _spread(ten, 3) == ten[0:7:3]
    assert _spread(two, 5) == two and _spread(seven, None) == seven


def test_requests_carry_tools_with_tool_choice_none_unless_left_out():
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    body = chat_body(Options("m"), "m", [], tools)
    assert body == {"model": "m", "messages": [], "temperature": 0.0, "max_tokens": 200,
                    "tools": tools, "tool_choice": "none"}
    bare = chat_body(Options("m", max_tokens=0, temperature=None, send_tools=False), "m", [], tools)
    assert bare == {"model": "m", "messages": []}


def test_the_mock_reader_answers_only_from_visible_evidence():
    cases = _tiny_cases()
    reader = Reader.of(cases)
    q = questions_of(cases)[0]
    assert reader.answer(q.messages) == "21:40"
    without = [m for m in q.messages if not str(m.get("content")).startswith("DROP-ME")]
    assert reader.answer(without) == UNKNOWN
    assert reader.answer(q.messages[-1:]) == UNKNOWN  # the question alone shows nothing
    assert reader.answer([{"role": "user", "content": judge_prompt("q", ("9", "21:40"), "at 21:40")}]) == "CORRECT"
    assert reader.answer([{"role": "user", "content": judge_prompt("q", ("21:40",), "21:45")}]) == "WRONG"


def _eval(argv, tmp_path, name="out", registry=None):
    """``context-engine eval`` through the CLI; with ``registry``, the eval entry point
    itself, given those rules."""
    out = tmp_path / f"{name}.json"
    args = [*argv, "--json", str(out), "--quiet"]
    code = eval_main(args, registry) if registry is not None else main(["eval", *args])
    return code, json.loads(out.read_text())


def test_lost_evidence_lowers_the_score_and_the_cache_answers_a_rerun(tmp_path, capsys):
    cases = _tiny_cases()
    path = _write(cases, tmp_path / "tiny.jsonl")
    mock = EvalMock(cases)  # ServerThread.__enter__ is typed as a ServerThread
    with mock:
        argv = [path, "--base-url", mock.base_url, "--model", "gpt-4o", "--rules", "drop_marked",
                "--judge-model", "judge", "--cache", str(tmp_path / "cache")]
        code, report = _eval(argv, tmp_path, registry=TEST_REGISTRY)
        asked = mock.state.asked
        code2, again = _eval(argv, tmp_path, "again", registry=TEST_REGISTRY)
        assert mock.state.asked == asked  # every answer and verdict from the cache
    assert code == code2 == 0
    assert (report["f1"]["original"], report["f1"]["rewritten"]) == (100.0, pytest.approx(100 / 3, abs=0.01))
    assert report["f1"]["diff"] == pytest.approx(-200 / 3, abs=0.01)
    assert report["f1"]["ci95"] == [-100.0, 0.0]  # three questions: the interval is wide
    assert report["judge"] == report["f1"]
    answers = {row["id"]: row["answers"] for row in report["per_question"]}
    assert answers["tiny/1#0"] == {"original": "21:40", "rewritten": UNKNOWN}
    assert answers["tiny/1#1"] == {"original": "LH 400", "rewritten": "LH 400"}
    bill = report["bill"]
    assert bill["rewritten"]["input_tokens"] < bill["original"]["input_tokens"]
    assert bill["original"]["reported"]["input_tokens"] == bill["original"]["input_tokens"] > 0
    assert bill["rewritten"]["sim"]["cost_usd"] < bill["original"]["sim"]["cost_usd"]
    assert bill["original"]["sim"]["cost_usd"] == bill["original"]["reported"]["cost_usd"]
    assert report["categories"]["tiny"]["f1"] == report["f1"]
    for key in ("seconds", "asked", "command", "date"):
        report.pop(key), again.pop(key)
    assert again == report
    assert "all" in capsys.readouterr().out


def test_passthrough_scores_equal_and_servers_without_usage_are_counted(tmp_path):
    cases = _tiny_cases()
    path = _write(cases, tmp_path / "tiny.jsonl")
    mock = EvalMock(cases, omit_usage=True, delay=0.05)  # ServerThread.__enter__ is typed as a ServerThread
    with mock:
        code, report = _eval([path, "--base-url", mock.base_url, "--model", "llama3.2",
                              "--rules", "", "--cache", "", "--concurrency", "2"], tmp_path)
        assert mock.state.asked == 3  # both arms send the same request: asked once
    assert code == 0 and report["rules"] == []
    assert report["f1"] == {"questions": 3, "original": 100.0, "rewritten": 100.0, "diff": 0.0,
                            "ci95": [0.0, 0.0]}
    assert report["bill"]["original"]["reported"] is None
    assert report["bill"]["original"]["output_tokens"] > 0
    assert report["price_model"] == "gpt-4o"  # llama3.2 has no list price


def test_a_failing_server_is_reported_never_cached(tmp_path):
    cases = _tiny_cases()
    path = _write(cases, tmp_path / "tiny.jsonl")
    mock = EvalMock(cases)  # ServerThread.__enter__ is typed as a ServerThread
    with mock:
        code, report = _eval([path, "--base-url", mock.base_url, "--model", "mock-500",
                              "--retries", "1", "--cache", str(tmp_path / "c"), "--rules", ""],
                             tmp_path)
    assert code == 1 and report["scored"] == 0 and len(report["errors"]) == 3
    assert "HTTP 500" in report["errors"][0]["error"]
    assert not (tmp_path / "c" / CACHE_FILE).exists()


def test_an_unreachable_server_is_an_error_per_question(tmp_path):
    async def ask():
        client = ChatClient("http://127.0.0.1:9/v1", None, AnswerCache(None), retries=0)
        try:
            return await client.ask({"model": "m", "messages": []})
        finally:
            await client.aclose()

    answer = asyncio.run(ask())
    assert answer.error and "Connect" in answer.error


@needs_data("locomo_dev.jsonl")
def test_locomo_scores_follow_evidence_retention_and_resume(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("rules:\n  fold_duplicates: true\n  tool_json: true\n  retrieve: true\n"
                      "  budget: true\nrule_options:\n  retrieve:\n    embedder: hashing\n")
    cases = load_cases(resolve_file("locomo"), 5)
    path = _write(cases, tmp_path / "locomo.jsonl")
    cache = str(tmp_path / "cache")
    mock = EvalMock(cases)  # ServerThread.__enter__ is typed as a ServerThread
    with mock:
        base = ["--base-url", mock.base_url, "--model", "gpt-4o", "--config", str(config),
                "--cache", cache]
        _eval([path, *base, "--limit", "2"], tmp_path, "first")  # interrupted after two
        asked = mock.state.asked
        code, report = _eval([path, *base], tmp_path)
        assert 0 < mock.state.asked - asked <= 6  # only the three new questions were asked
        drop = tmp_path / "drop.yaml"  # retrieve brings nothing back: old turns are lost
        drop.write_text(config.read_text() + "    threshold: 5.0\n")
        _, dropped = _eval([path, *base[:-4], "--config", str(drop), "--cache", cache],
                           tmp_path, "drop")
    assert code == 0 and report["f1"]["original"] == 100.0
    # the reader is perfect: a rewritten answer is right exactly when its evidence survived
    system = EngineSystem("engine", engine_settings(None, str(config)), "gpt-4o")
    for q, row in zip(questions_of(cases), report["per_question"]):
        out = asyncio.run(system.open("check:" + q.id).rewrite(q.messages, q.tools))
        kept = all(probe_retained(p.evidence, visible_text(out.messages))
                   for c in cases if c.id == q.id for p in c.probes)
        assert row["f1"]["rewritten"] == float(kept), q.id
    assert dropped["f1"]["rewritten"] < report["f1"]["rewritten"]
    assert dropped["f1"]["ci95"][1] < 0
    assert dropped["bill"]["rewritten"]["input_tokens"] < 0.2 * dropped["bill"]["original"]["input_tokens"]
