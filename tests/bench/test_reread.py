"""The replay's re-read model (``bench/reread.py``): the agent's way back to next-action
evidence a rewrite hid is billed exactly where that evidence is missing, by the cheaper of a
recall round and a re-run command, and the figures are the same on every run.

The sessions are synthetic and small: a coding agent reading one notes file per turn,
the piece its next command needs in an early result, and the real ``compact`` rule set to
clear early (epochs from 1,500 tokens, only the newest result kept, no skeleton).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

from context_engine.bench.billing import MODELS, CaseBill, render
from context_engine.bench.cases import Case, Probe, as_text_actions, request_points
from context_engine.bench.cli import main
from context_engine.bench.recall_model import recall_turn
from context_engine.bench.reread import Rereads
from context_engine.bench.runner import replay_case, run_replay, summarize
from context_engine.bench.systems import build_systems, engine_settings, parse_variant
from context_engine.bench.tally import Tally
from context_engine.proxy.billing.row_bill import row_bill
from context_engine.proxy.engine.originals import original_id
from context_engine.proxy.engine.recall_resolve import resolve
from context_engine.proxy.engine.tokens import TokenCounter
from context_engine.proxy.recording.ledger import LedgerRow

COUNTER = TokenCounter("o200k_base")
MAGIC = "MAGIC_4242"
BASH = {"type": "function", "function": {"name": "bash", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}}}}
CLEAR_EARLY = ("early:compact.trigger_tokens=1500,compact.clear_at_least=300,compact.keep_recent=1,"
               "compact.keep_related=0,compact.gist_chars=0,compact.min_item_tokens=20,"
               "compact.keep_prose=1,compact.way_back=false,compact.identifiers=false")


def _body(k: int, rows: int) -> str:
    return "\n".join(f"notes_{k} row {j}: value_{k}_{j} alpha beta gamma delta" for j in range(rows))


def session(rounds: int = 10, sizes: dict[int, int] | None = None) -> list[dict[str, Any]]:
    """system, task, then one ``cat notes_k.txt`` per turn; result 1 (and any result
    ``sizes`` names) holds the piece the agent needs later."""
    sizes = sizes or {1: 60}
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. Run one command per turn."},
        {"role": "user", "content": "Fix the parser bug in src/parse.py."}]
    for k in range(rounds):
        call = {"id": f"c{k}", "type": "function", "function": {
            "name": "bash", "arguments": json.dumps({"command": f"cat notes_{k}.txt"})}}
        messages.append({"role": "assistant", "content": f"THOUGHT: step {k}, I read notes_{k}.txt.",
                         "tool_calls": [call]})
        body = _body(k, sizes.get(k, 60)) + (f"\nthe fix goes in {MAGIC}" if k in sizes else "")
        messages.append({"role": "tool", "tool_call_id": f"c{k}", "content": body})
    return messages


def _case(messages: list[dict[str, Any]], cuts: tuple[int, ...]) -> Case:
    """Next-action probes at ``cuts`` (request lengths): the early piece, and one in the
    newest result (always visible)."""
    def probes(cut: int) -> tuple[Probe, ...]:
        newest = messages[cut - 1]["content"].split(": ")[1].split(" ")[0]
        return (Probe("where?", MAGIC, (MAGIC,), "next_action"),
                Probe("newest?", newest, (newest,), "next_action"),
                Probe("task?", "", ("Fix the parser bug",), "task"))

    return Case("t/reread", messages, tools=[BASH], meta={"dataset": "test"},
                cuts=tuple((c, probes(c)) for c in cuts))


def _system(variant: str | None = CLEAR_EARLY):
    settings = engine_settings("compact")
    if variant:
        _, settings = parse_variant(variant, settings)
    return build_systems(settings, kinds=("engine",))[1]


def _replay(case: Case, system, reread: bool) -> Tally:
    tally = Tally()
    asyncio.run(replay_case(case, system, COUNTER, tally, 0.1, reread=reread))
    return tally


def _cost(prompt: int, read: int, write: int, completion: int) -> float:
    row = LedgerRow(model=MODELS["openai"], prompt_tokens=prompt, cached_tokens=read,
                    cache_write_tokens=write, completion_tokens=completion, arm="passthrough",
                    tokens_original=prompt, tokens_sent=prompt)
    priced = row_bill(vars(row))
    assert priced is not None
    return priced.actual


def test_the_way_back_is_billed_exactly_where_next_action_evidence_is_missing():
    """Three cut points: at request 6 the piece is visible (no epoch yet), at the last one
    compact has cleared it. Only the last costs anything: one recall round, priced as the
    follow-up the proxy sends (the request, the call, the recalled result) on the
    session's simulated cache, plus the call's output; the bill without it is unchanged."""
    messages = session()
    case = _case(messages, (6, len(messages)))
    off, on = _replay(case, _system(), False), _replay(case, _system(), True)
    bill_off, bill_on = off.bills["openai"], on.bills["openai"]
    assert bill_off.way_back is None and "way_back" not in bill_off.summary()
    assert (bill_on.direct, bill_on.billed) == (bill_off.direct, bill_off.billed)
    way = bill_on.way_back
    assert way is not None
    assert (way.checked, way.cuts, way.probes, way.pieces) == (4, 1, 1, 1)
    assert (way.recalled, way.rerun, way.unreachable, way.probes_back) == (1, 0, 0, 1)
    assert (way.recall_rounds, way.rereads, way.carry_usd) == (1, 0, 0.0)
    assert on.by_kind["next_action"] == [3, 4]

    # the same follow-up, built from the words on a replay by hand
    system = _system()
    session_ = system.open("by-hand", MODELS["openai"])
    bill = CaseBill("openai", case.id)
    for i in request_points(messages):
        out = asyncio.run(session_.rewrite(messages[: i + 1], case.tools))
        tools = out.tools_sent(case.tools)
        bill.add(messages[: i + 1], case.tools, out, 0, 0, tools)
    oid = original_id(messages[5]["content"])
    answer = resolve(replace(out.recall.scope, spent=0), {"id": oid})
    assert MAGIC in answer and f"{oid}" in json.dumps(out.messages)
    turn = recall_turn([oid], [answer], "id")
    prompt, read, write = bill.proxy_sim.bill(render([*out.messages, *turn], tools))
    assert read > 0  # the request's prefix, cached by the request itself
    assert way.usd == _cost(prompt, read, write, COUNTER.message(turn[0]))
    assert bill_on.summary()["way_back"]["cost_vs_direct"] == round(
        (bill_on.billed + way.usd) / bill_on.direct, 4)


def test_nothing_cleared_costs_no_way_back():
    messages = session()
    tally = _replay(_case(messages, (6, len(messages))), _system(None), True)
    way = tally.bills["openai"].way_back
    assert way is not None and (way.checked, way.cuts, way.usd) == (4, 0, 0.0)


def test_recall_is_chosen_where_it_is_cheaper_and_a_rerun_where_that_is():
    """With tools the engine offers context_recall: a recall round (the recalled result
    at the uncached price, a short call as output) beats the agent's re-run turn (its
    reply as output, kept in the history). When the marker names a long result and a
    short one holds the piece too, re-running the short one is cheaper."""
    for rounds, sizes, chosen in ((10, {1: 60}, "recall"), (12, {1: 300, 2: 3}, "rerun")):
        messages = session(rounds, sizes)
        case = _case(messages, (len(messages),))
        system = _system()
        tally = _replay(case, system, True)
        way = tally.bills["openai"].way_back
        assert way is not None and way.cuts == 1, sizes
        assert (way.recall_rounds, way.rereads) == ((1, 0) if chosen == "recall" else (0, 1)), sizes
        assert (way.both, way.both_recall) == (1, int(chosen == "recall"))

        # both ways priced on the same cache: the one taken is the cheaper
        session_, bill = system.open(f"plans:{chosen}", MODELS["openai"]), CaseBill("openai", "p")
        rereads = Rereads(bill, COUNTER)
        for i in request_points(messages):
            out = asyncio.run(session_.rewrite(messages[: i + 1], case.tools))
            bill.add(messages[: i + 1], case.tools, out, 0, 0, out.tools_sent(case.tools))
        plans = rereads.plans(messages, out, out.tools_sent(case.tools), [MAGIC])
        recall, rerun = plans
        assert (recall.rounds, recall.commands, rerun.rounds, rerun.commands) == (1, 0, 0, 1)
        assert way.usd == min(p.usd for p in plans)
        assert (recall.usd < rerun.usd) == (chosen == "recall"), (recall.usd, rerun.usd)


def test_a_client_without_tools_re_runs_the_command_and_carries_it_until_the_next_epoch():
    """A text-action harness sends no tools: no recall tool, so the agent re-runs the
    command. Its turn stays in the history: the next request reads it at the cached price,
    the epoch after that clears it."""
    messages = session(14)
    case = as_text_actions(_case(messages, (16,)))
    tally = _replay(case, _system(), True)
    way = tally.bills["openai"].way_back
    assert way is not None
    assert (way.cuts, way.recall_rounds, way.rereads, way.rerun, way.both) == (1, 0, 1, 1, 0)
    assert way.usd > 0 and way.carried == 0  # an epoch came after the cut
    assert 0 < way.carry_usd < way.usd


def test_the_way_back_is_the_same_on_every_run(tmp_path, capsys):
    """End to end through ``context-engine bench``: a small session file cut at three
    points, replayed with both billing models; two runs give the same figures, and
    ``--no-reread`` gives the same bill without them."""
    messages = session(12)
    data = tmp_path / "sessions.jsonl"
    with data.open("w") as fh:
        for cut in (6, 16, len(messages)):
            case = _case(messages[:cut], (cut,))
            probes = [{"question": p.question, "answer": p.answer, "evidence": list(p.evidence),
                       "kind": p.kind} for p in case.cuts[0][1]]
            fh.write(json.dumps({"id": f"s@{cut}", "messages": messages[:cut], "tools": [BASH],
                                 "probes": probes, "meta": {"task": "s", "cut_index": cut}}) + "\n")
    reports = []
    for run, flags in (("a", []), ("b", []), ("off", ["--no-reread"])):
        out = tmp_path / f"{run}.json"
        assert main([str(data), "--replay", "--anthropic", "--rules", "compact", "--systems", "engine",
                     "--variant", CLEAR_EARLY, "--quiet", "--json", str(out), *flags]) == 0
        reports.append(json.loads(out.read_text()))
    assert capsys.readouterr().out.count("what clearing costs the agent") == 2  # not with --no-reread
    a, b, off = (r["files"]["sessions.jsonl"]["systems"]["early"]["replay"]["billing"] for r in reports)
    assert a == b
    assert (reports[0]["reread"], reports[2]["reread"]) == (True, False)
    for kind in ("openai", "anthropic"):
        assert a[kind]["way_back"]["cuts"] >= 1 and "way_back" not in off[kind]
        assert a[kind]["way_back"]["cost_vs_direct"] > a[kind]["cost_vs_direct"] == off[kind]["cost_vs_direct"]


def test_the_replay_runner_passes_the_flag_to_both_billing_models():
    messages = session()
    tallies = asyncio.run(run_replay([_case(messages, (len(messages),))], [_system()], COUNTER, 0.1,
                                     anthropic=True, reread=True))
    out = summarize(tallies)["engine"]["replay"]["billing"]
    assert out["openai"]["way_back"]["cuts"] == out["anthropic"]["way_back"]["cuts"] == 1
