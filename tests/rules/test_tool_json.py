"""tool_json: golden cases, unit behaviour, hypothesis properties, and a check on real traces."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from context_engine.proxy.engine.originals import original_id, store_key, stored_original
from context_engine.proxy.engine.tokens import TokenCounter
from context_engine.proxy.store.stores import MemoryStore
from context_engine.rules import REGISTRY
from context_engine.rules.tool_json.compact import CompactOptions, compact
from context_engine.rules.tool_json.lookahead import tool_names
from context_engine.rules.tool_json.rule import ToolJson, ToolJsonConfig
from context_engine.rules.tool_json.schema_templates import (
    keep_paths,
    learned_paths,
    load_templates,
    parse_path,
    used_words,
)
from tests.conftest import DATA, needs_data
from tests.harness import assert_valid_rewrite, content, make_ctx, make_deps, run_rule

COUNTER = TokenCounter("o200k_base")


def call(cid: str, name: str, args: dict) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}


def result(cid: str, value) -> dict:
    content = value if isinstance(value, str) else json.dumps(value)
    return {"role": "tool", "tool_call_id": cid, "content": content}


SYSTEM = {"role": "system", "content": "You are an agent."}
ROWS = [{"id": f"R{i}X", "city": "Austin", "price": 100 + i, "tags": None} for i in range(6)]


def test_docstring_example_holds():
    import context_engine.rules.tool_json.rule as module

    doc = module.__doc__ or ""
    before = doc.split("Before (``search_direct_flight``)::")[1].split("After::")[0]
    after = doc.split("After::")[1].split("## Options")[0]
    value = json.loads(" ".join(before.split()))
    expected = "\n".join(line.strip() for line in after.strip().splitlines())
    assert compact(value, CompactOptions()) == expected


def test_registered_under_its_name():
    assert REGISTRY["tool_json"] is ToolJson and ToolJson.name == "tool_json"


# --- compaction -----------------------------------------------------------------------------


def test_compaction_keeps_zero_and_false_unless_drop_defaults():
    value = {"a": 0, "b": False, "c": None, "d": "", "e": "x"}
    assert compact(value, CompactOptions()) == "a:0\nb:false\ne:x"
    assert compact(value, CompactOptions(drop_defaults=True)) == "e:x"
    assert compact(value, CompactOptions(drop_empty=False)) == 'a:0\nb:false\nd:""\ne:x'
    assert compact(value, CompactOptions(tight_keys=False)) == "a: 0\nb: false\ne: x"


def test_compaction_keeps_nulls_inside_arrays_where_position_matters():
    assert compact({"xs": [1, None, 3]}, CompactOptions()) == "xs:[1,null,3]"


def test_table_needs_enough_filled_cells():
    sparse = [{"a": 1}, {"b": 2}, {"c": 3}]
    assert compact(sparse, CompactOptions()) == "[{a:1},{b:2},{c:3}]"
    assert compact(ROWS[:2], CompactOptions(tables=False)).startswith("[{id:R0X")


def test_ambiguous_strings_stay_quoted():
    value = {"n": "42", "t": "true", "s": " pad", "nl": "a\nb", "br": "{x}", "ok": "HAT069"}
    text = compact(value, CompactOptions())
    assert text == 'n:"42"\nt:"true"\ns:" pad"\nnl:"a\\nb"\nbr:"{x}"\nok:HAT069'


def test_nested_table_inside_object_uses_a_dotted_path():
    text = compact({"data": {"items": ROWS[:2], "total": 2}}, CompactOptions())
    assert text.splitlines()[0] == "data.items (2 rows; all: city=Austin):"
    assert text.splitlines()[-1] == "data.total:2"


# --- templates --------------------------------------------------------------------------------


def test_keep_paths_with_wildcards_and_transparent_arrays():
    value = {"flights": [{"n": "A1", "p": 1}, {"n": "B2", "p": 2}], "m": {"k1": {"id": 1, "x": 2}}}
    assert keep_paths(value, [parse_path("flights[*].n"), parse_path("m.*.id")]) == {
        "flights": [{"n": "A1"}, {"n": "B2"}], "m": {"k1": {"id": 1}}}


def test_template_file_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("some_tool: [a, b]\n")
    with pytest.raises(TypeError, match="bad.yaml:some_tool"):
        load_templates([bad])


def test_missing_or_broken_template_files_fail_at_startup(tmp_path):
    with pytest.raises(ValueError, match="no such template"):
        ToolJson(ToolJsonConfig(template_paths=(str(tmp_path / "nope.yaml"),)), make_deps())
    (tmp_path / "broken.yaml").write_text("a: [b\n")
    with pytest.raises(ValueError, match="not valid YAML"):
        load_templates([tmp_path])


def test_template_paths_option_adds_templates_with_aliases_and_clip(tmp_path):
    (tmp_path / "t.yaml").write_text(
        "lookup:\n  keep: [id, note]\n  aliases: {note: n}\n  clip: {note: 5}\n")
    msgs = [SYSTEM, {"role": "user", "content": "go"}, call("c1", "lookup", {}),
            result("c1", {"id": "A_1", "note": "a very long note here", "junk": "x" * 200})]
    deps = make_deps()
    out = run_rule(ToolJson, msgs, deps=deps, template_paths=(str(tmp_path),))
    text = content(out.messages[3])
    assert text.startswith("id:A_1\nn:a ver...\n[tool_json: template cut; original: orig:")
    key = text.rsplit("original: ", 1)[1].rstrip("]")
    assert stored_original(deps.store, key, scope="") == msgs[3]["content"]


def test_learned_paths_generalise_ids_and_keep_identifiers():
    value = {"pm": {"card_7": {"id": "card_7", "brand": "visa"}}, "dob": "1990-01-02", "x": 5}
    words, joined = used_words(["use brand visa"])
    assert learned_paths(value, words, joined) == [("pm", "*", "brand")]
    assert learned_paths(value, set(), "", keep_ids=True) == [("pm", "*", "id")]


def test_learned_paths_are_stored_per_tool():
    msgs = [SYSTEM, {"role": "user", "content": "rows"}, call("c1", "rows", {}), result("c1", ROWS),
            {"role": "assistant", "content": "R2X costs 102"}, {"role": "user", "content": "ok"}]
    deps = make_deps()
    run_rule(ToolJson, msgs, deps=deps, learned_templates=True, recent_turns=1, block_turns=2)
    assert json.loads(deps.store.get("tool_json:learned:rows") or b"null") == ["id", "price"]


# --- messages ---------------------------------------------------------------------------------


def test_tool_names_follow_the_nearest_call():
    msgs = [call("x", "first", {}), result("x", "1"), call("x", "second", {}), result("x", "2")]
    assert tool_names(msgs) == {1: "first", 3: "second"}


def test_unchanged_request_returns_the_same_context():
    ctx = make_ctx([SYSTEM, {"role": "user", "content": "hi"}])
    rule = ToolJson(ToolJsonConfig(), make_deps())
    assert asyncio.run(rule.apply(ctx)) is ctx


def test_lossless_rewrite_stores_the_original_and_notes_the_kind():
    msgs = [SYSTEM, {"role": "user", "content": "rows"}, call("c1", "rows", {}), result("c1", ROWS)]
    store = MemoryStore()
    out = run_rule(ToolJson, msgs, deps=make_deps(store=store))
    key = original_id(msgs[3]["content"])
    assert out.notes["tool_json"] == {"lossless": 1, "originals": [["c1", key]]}
    assert "[tool_json" not in content(out.messages[3])
    assert stored_original(store, key, scope="") == msgs[3]["content"]


def test_truncated_json_is_treated_as_text():
    text = '{"error": "", "response": "[{\\"id\\":\\"EKVF\\"}, ...'
    msgs = [SYSTEM, {"role": "user", "content": "go"}, call("c1", "t", {}), result("c1", text)]
    assert run_rule(ToolJson, msgs).messages == msgs


def test_json_still_over_max_chars_is_compacted_then_cut():
    rows = [{"id": f"R{i}X", "city": f"City number {i}", "price": 100 + i} for i in range(40)]
    msgs = [SYSTEM, {"role": "user", "content": "go"}, call("c1", "rows", {}), result("c1", rows)]
    out = run_rule(ToolJson, msgs, max_chars=300)
    text = content(out.messages[3])
    assert out.notes["tool_json"]["clipped"] == 1 and len(text) <= 300
    assert text.startswith("(40 rows):\nid,city,price\nR0X,City number 0,100\n")
    assert "[tool_json: middle of " in text and text.endswith("R39X,City number 39,139")


def test_closed_block_rewrite_never_changes_as_the_session_grows():
    msgs = [SYSTEM]
    for i in range(8):
        msgs += [{"role": "user", "content": f"q{i}"}, call(f"c{i}", "rows", {}),
                 result(f"c{i}", ROWS),
                 {"role": "assistant", "content": f"R{i % 6}X is {100 + i % 6}"}]
    seen: dict[int, str] = {}
    for end in range(2, len(msgs) + 1):
        out = run_rule(ToolJson, msgs[:end], learned_templates=True, stub_unused=True)
        for i, m in enumerate(out.messages):
            if m["role"] == "tool" and "[tool_json" in content(m):
                assert seen.setdefault(i, content(m)) == m["content"]
    assert seen, "no closed block was ever cut"


# --- properties ------------------------------------------------------------------------------
# (validity, idempotence, tokens, determinism: tests/rules/test_properties.py)

IDENT = st.from_regex(r"[A-Za-z][A-Za-z0-9_@.-]{2,10}", fullmatch=True).filter(
    lambda s: s.lower() not in ("true", "false", "null"))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["id", "name", "n", "sub"]),
                                st.one_of(IDENT, st.integers(), st.dictionaries(
                                    st.sampled_from(["a", "b"]), IDENT, max_size=2)),
                                min_size=1), min_size=1, max_size=5))
def test_lossless_compaction_keeps_every_identifier_verbatim(rows):
    text = compact({"rows": rows}, CompactOptions())
    for row in rows:
        for v in row.values():
            for leaf in (v.values() if isinstance(v, dict) else [v]):
                assert str(leaf) in text


# --- real traces --------------------------------------------------------------------------------


@needs_data("agent_traces_dev.jsonl")
def test_lossless_on_real_traces_keeps_all_evidence_and_cuts_tool_tokens():
    cases = [json.loads(line) for line in (DATA / "agent_traces_dev.jsonl").open()][::8]
    before = after = 0
    for case in cases:
        out = run_rule(ToolJson, case["messages"])
        assert_valid_rewrite(case["messages"], out)
        blob = json.dumps(out.messages, ensure_ascii=False)
        for probe in case["probes"]:
            for evidence in probe["evidence"]:
                assert evidence in blob, (case["id"], evidence)
        before += sum(COUNTER.message(m) for m in case["messages"] if m["role"] == "tool")
        after += sum(COUNTER.message(m) for m in out.messages if m["role"] == "tool")
    assert after < 0.7 * before


# --- resent history -------------------------------------------------------------------------


def test_a_resent_result_is_rewritten_alike_and_its_original_stays_stored():
    """Clients resend their history: the second pass finds each result by content. It must
    give the same bytes, and put the original back if the store lost it meanwhile."""
    store = MemoryStore()
    rule = ToolJson(ToolJsonConfig(max_chars=300), make_deps(store=store))
    big = "\n".join(f"line {i}: " + "x" * 40 for i in range(40))
    messages = [SYSTEM, {"role": "user", "content": "go"}, call("c1", "search", {"q": "a"}),
                result("c1", ROWS), call("c2", "grep", {"q": "b"}), result("c2", big)]
    first = asyncio.run(rule.apply(make_ctx(messages)))
    kept = {k: v for k, v in store._data.items()}
    assert store_key(original_id(json.dumps(ROWS)), "") in kept and store_key(original_id(big), "") in kept
    store._data.clear()  # evicted, restarted store, ...
    again = asyncio.run(rule.apply(make_ctx(json.loads(json.dumps(messages)))))
    assert json.dumps(again.messages) == json.dumps(first.messages)
    assert store._data == kept


# --- restated records as field diffs ---------------------------------------------------------

RES: dict[str, Any] = {"reservation_id": "HATHAU", "user_id": "mia_li_3668", "cabin": "economy",
       "flights": [{"flight_number": "HAT136", "price": 152}, {"flight_number": "HAT039", "price": 103}],
       "payment_history": [{"payment_id": "credit_card_4421486", "amount": 305}],
       "insurance": "no", "note": None}


def _session(*values) -> list[dict]:
    msgs: list[dict] = [SYSTEM, {"role": "user", "content": "cancel HATHAU"}]
    for n, value in enumerate(values):
        msgs += [call(f"c{n}", "tool", {"n": n}), result(f"c{n}", value)]
    return msgs


def test_a_restated_record_goes_out_as_its_changed_fields_and_its_referent_stays():
    cancelled = {**RES, "payment_history": RES["payment_history"] + [
        {"payment_id": "credit_card_4421486", "amount": -305}], "status": "cancelled"}
    del cancelled["insurance"]
    msgs = _session(RES, cancelled)
    first = run_rule(ToolJson, msgs[:4])
    out = run_rule(ToolJson, msgs)
    assert out.messages[:4] == first.messages  # the referent was sent before: prefix stable
    assert content(out.messages[3]) == compact(RES, CompactOptions())
    assert content(out.messages[5]) == (
        "[changed fields of the result of tool call c0 above (reservation_id: HATHAU); every "
        "other field is as there; no longer there: insurance]\n"
        "payment_history (2 rows; all: payment_id=credit_card_4421486):\namount\n305\n-305\n"
        "status:cancelled")
    assert out.notes["tool_json"]["diff"] == 1
    assert_valid_rewrite(msgs, out)


def test_diffs_refer_to_the_latest_record_shown_in_full_never_to_a_diff():
    b = {**RES, "cabin": "business"}
    c = {**RES, "cabin": "business", "insurance": "yes"}
    other = {**RES, "reservation_id": "ZZZ999"}
    out = run_rule(ToolJson, _session(RES, b, other, c, RES))
    assert content(out.messages[5]).startswith("[changed fields of the result of tool call c0 above")
    assert content(out.messages[5]).endswith("]\ncabin:business")
    assert content(out.messages[7]).startswith("reservation_id:ZZZ999\n[8 lines: lines 2-9 of ")
    assert content(out.messages[9]).startswith("[changed fields of the result of tool call c0 above")
    assert content(out.messages[9]).endswith("]\ncabin:business\ninsurance:yes")
    assert content(out.messages[11]) == ("[the same fields as the result of tool call c0 above "
                                "(reservation_id: HATHAU)]")


def test_no_diff_without_identity_or_with_learned_templates_or_the_option_off():
    nested = {"reservation": {"id": "A"}, "cabin": "economy"}
    out = run_rule(ToolJson, _session(nested, {**nested, "cabin": "business"}))
    assert not content(out.messages[5]).startswith("[")
    options: list[dict[str, Any]] = [{"learned_templates": True}, {"diff_repeats": False}]
    for opts in options:
        out = run_rule(ToolJson, _session(RES, {**RES, "cabin": "business"}), **opts)
        assert not content(out.messages[5]).startswith("["), opts


# --- repeated lines of text results ----------------------------------------------------------

REF = re.compile(r"\[(\d+) lines: lines (\d+)-(\d+) of the (latest )?result of tool call (.+) above\]")
WINDOW = [f"{n}:    value_{n} = compute({n}, 'field_{n}')" for n in range(100, 130)]


def expand(messages: list[Any]) -> list[str]:
    """Every tool result's text with each line reference replaced by the lines it names,
    read from the results above as they were sent: what the model can reconstruct."""
    texts: list[str] = []
    for i, m in enumerate(messages):
        if m["role"] != "tool":
            continue
        lines: list[str] = []
        for line in m["content"].split("\n"):
            found = REF.fullmatch(line)
            if found is None:
                lines.append(line)
                continue
            n, a, b, _, cid = found.groups()
            above = [x for x in messages[:i] if x["role"] == "tool" and x["tool_call_id"] == cid]
            run = above[-1]["content"].split("\n")[int(a) - 1:int(b)]
            assert len(run) == int(n) == int(b) - int(a) + 1
            lines.extend(run)
        texts.append("\n".join(lines))
    return texts


def _view(cid: str, lines: list[str], head: str = "[File: src/app.py (400 lines total)]") -> list:
    return [call(cid, "open", {"path": "src/app.py"}), result(cid, "\n".join([head, *lines]))]


def test_an_edit_echoing_the_window_refers_to_the_lines_shown_before():
    edited = [*WINDOW[:12], "111:    value_111 = 0  # fixed", *WINDOW[13:]]
    msgs = [SYSTEM, {"role": "user", "content": "fix line 111"}, *_view("c1", WINDOW),
            *_view("c2", edited, "File updated. Please review the changes.")]
    first = run_rule(ToolJson, msgs[:4])
    out = run_rule(ToolJson, msgs)
    assert out.messages[:4] == first.messages == msgs[:4]  # the referent goes out unchanged
    assert content(out.messages[5]).split("\n") == [
        "File updated. Please review the changes.",
        "[12 lines: lines 2-13 of the result of tool call c1 above]",
        "111:    value_111 = 0  # fixed",
        "[17 lines: lines 15-31 of the result of tool call c1 above]"]
    assert expand(out.messages) == expand(msgs)  # lossless while c1 is in the request
    assert out.notes["tool_json"]["lines"] == 1
    assert out.notes["tool_json"]["originals"] == [["c2", original_id(msgs[5]["content"])]]
    assert_valid_rewrite(msgs, out)


def test_line_numbers_count_the_earlier_result_as_sent_and_repeated_ids_name_the_latest():
    added = [f"    note_{n} = record('added line {n}')" for n in range(5)]
    other = [f"{n}: other_{n} = load('other file, line {n}')" for n in range(10)]
    msgs = [SYSTEM, {"role": "user", "content": "go"}, *_view("c1", WINDOW),
            *_view("c2", [*WINDOW[:12], *added, *WINDOW[12:]], "File updated."), *_view("c3", added),
            *_view("c1", other, "[File: src/other.py]"), *_view("c4", other)]
    out = run_rule(ToolJson, msgs)
    texts = [content(m) for m in out.messages if m["role"] == "tool"]
    assert texts[1].split("\n")[:4] == [
        "File updated.",
        "[12 lines: lines 2-13 of the result of tool call c1 above]", added[0], added[1]]
    assert texts[2].endswith("\n[5 lines: lines 3-7 of the result of tool call c2 above]")
    assert texts[3] == content(msgs[9])  # nothing of it was shown before
    assert texts[4].endswith("\n[10 lines: lines 2-11 of the latest result of tool call c1 above]")
    assert expand(out.messages) == expand(msgs)
    assert run_rule(ToolJson, out.messages).messages == out.messages  # a second pass: no change


def test_short_or_cheap_runs_stay_json_results_fold_as_compacted_and_the_option_turns_it_off():
    short = ["a = 1", "b = 2", "c = 3"]
    msgs = [SYSTEM, {"role": "user", "content": "go"}, *_view("c1", WINDOW), *_view("c2", WINDOW[:2], "ok"),
            *_view("c3", short), *_view("c4", short), call("c5", "get", {}), result("c5", ROWS),
            call("c6", "get", {}), result("c6", ROWS[:5])]
    out = run_rule(ToolJson, msgs)
    assert [m for m in out.messages[:10]] == msgs[:10]
    assert content(out.messages[13]) == (  # compacted JSON folds as it goes out
        "(5 rows; all: city=Austin):\n[6 lines: lines 2-7 of the result of tool call c5 above]")
    off = run_rule(ToolJson, [*msgs[:4], *_view("c2", WINDOW)], line_repeats=False)
    assert content(off.messages[5]) == content(msgs[3])  # equal text, not folded when off


@needs_data("agent_traces_dev.jsonl")
def test_on_real_coding_traces_every_folded_result_expands_to_its_original():
    cases = [json.loads(line) for line in (DATA / "agent_traces_dev.jsonl").open()]
    before = after = folded = 0
    for case in cases:
        if case["meta"]["dataset"] != "swe-agent":
            continue
        out = run_rule(ToolJson, case["messages"])
        assert_valid_rewrite(case["messages"], out)
        assert expand(out.messages) == expand(case["messages"]), case["id"]
        folded += out.notes.get("tool_json", {}).get("lines", 0)
        before += sum(COUNTER.message(m) for m in case["messages"] if m["role"] == "tool")
        after += sum(COUNTER.message(m) for m in out.messages if m["role"] == "tool")
    assert folded >= 4 and after < 0.6 * before


@given(st.lists(st.lists(st.sampled_from(["x = 1", "y = 2", "z = 3", "return x", ""]),
                         min_size=1, max_size=30), min_size=1, max_size=6),
       st.integers(1, 4), st.integers(-2, 8))
@settings(max_examples=150, deadline=None)
def test_any_fold_expands_back_to_the_results_as_the_client_sent_them(views, min_lines, saving):
    msgs: list[dict] = [SYSTEM, {"role": "user", "content": "go"}]
    for n, lines in enumerate(views):
        msgs += _view(f"c{n % 3}", lines)
    out = run_rule(ToolJson, msgs, line_repeats_min_lines=min_lines,
                   line_repeats_min_saving=saving)
    assert expand(out.messages) == expand(msgs)
    assert COUNTER.messages(out.messages) <= COUNTER.messages(msgs)
    assert run_rule(ToolJson, out.messages, line_repeats_min_lines=min_lines,
                    line_repeats_min_saving=saving).messages == out.messages


# --- numbered lines ---------------------------------------------------------------------------

CAT_N = "\n".join(f"{n:6d}\t    value_{n} = compute({n})" for n in range(95, 105))
READ = "\n".join(f"{n:6d}→def f_{n}():" for n in range(1, 6))


def test_a_file_view_loses_the_padding_of_its_line_numbers_and_nothing_else():
    """cat -n / nl -ba (tab) and Claude Code's Read (→): the spaces before each number go,
    the number, its separator and the line's own indentation stay; the original is stored."""
    store = MemoryStore()
    msgs = [SYSTEM, {"role": "user", "content": "look"}, call("c1", "bash", {"cmd": "nl -ba app.py"}),
            result("c1", f"<output>\n{CAT_N}\n</output>"), call("c2", "Read", {"file_path": "a.py"}),
            result("c2", READ)]
    out = run_rule(ToolJson, msgs, deps=make_deps(store=store))
    sent = content(out.messages[3]).split("\n")
    assert sent[1] == "95\t    value_95 = compute(95)" and sent[-2] == "104\t    value_104 = compute(104)"
    assert sent[0] == "<output>" and sent[-1] == "</output>"
    assert content(out.messages[5]).split("\n")[0] == "1→def f_1():"
    assert out.notes["tool_json"]["numbers"] == 2
    assert stored_original(store, original_id(msgs[3]["content"]), scope="") == msgs[3]["content"]
    assert COUNTER.text(content(out.messages[3])) < COUNTER.text(msgs[3]["content"])
    assert_valid_rewrite(msgs, out)


def test_a_few_numbered_lines_or_the_option_off_leave_a_result_as_it_came():
    two = "total 2\n     1\tone\n     2\ttwo"  # fewer than 3 numbered lines: not a file view
    msgs = [SYSTEM, {"role": "user", "content": "go"}, call("c1", "bash", {}), result("c1", two),
            call("c2", "bash", {}), result("c2", CAT_N)]
    assert content(run_rule(ToolJson, msgs).messages[3]) == two
    off = run_rule(ToolJson, msgs, number_padding=False)
    assert off.messages == msgs


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 8), st.integers(0, 99999), st.sampled_from(["\t", "→", " ", ""]),
                          st.text(alphabet=" ab1\t→", max_size=12)), max_size=12))
def test_dropping_the_padding_only_ever_removes_spaces_and_is_stable(lines):
    from context_engine.rules.tool_json.numbered import unpad

    text = "\n".join(" " * pad + f"{n}{sep}{rest}" for pad, n, sep, rest in lines)
    once = unpad(text)
    assert once.replace(" ", "") == text.replace(" ", "")  # only spaces go
    numbered = [bool(re.match(r" +\d+(\t|→)", line)) for line in text.split("\n")]
    # the spaces before a number that a tab or → ends, where 3 or more lines have them
    assert once.split("\n") == [line.lstrip(" ") if hit and sum(numbered) >= 3 else line
                                for line, hit in zip(text.split("\n"), numbered, strict=True)]
    assert unpad(once) == once  # a resent result comes out the same


@needs_data("long_traces_dev.jsonl")
def test_on_the_long_coding_sessions_only_padding_goes_and_the_views_cost_less():
    """Every tool result of long_traces_dev as tool_json sends it with only this step on:
    each line equal to the original's, or to it without the spaces before its number;
    the file views' tokens fall by at least 4%."""
    before = after = 0
    longest: dict[str, Any] = {}  # one cut per session: the longest
    for line in (DATA / "long_traces_dev.jsonl").open():
        case = json.loads(line)
        task = case["meta"]["task"]
        if task not in longest or len(case["messages"]) > len(longest[task]["messages"]):
            longest[task] = case
    for case in longest.values():
        out = run_rule(ToolJson, case["messages"], line_repeats=False, diff_repeats=False, max_chars=0)
        for m, o in zip(case["messages"], out.messages):
            if m["role"] != "tool":
                continue
            for a, b in zip(m["content"].split("\n"), content(o).split("\n"), strict=True):
                assert b == a or (b == a.lstrip(" ") and re.match(r" +\d+(\t|→)", a)), (case["id"], a, b)
            before += COUNTER.text(m["content"])
            after += COUNTER.text(content(o))
    assert after < 0.96 * before
