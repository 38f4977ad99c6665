"""bench/memory_eval.py and bench/budget_curve.py: pooled scores and the budget knob's options."""

from __future__ import annotations

from context_engine.bench.budget_curve import options_for, table
from context_engine.bench.cases import Case
from context_engine.bench.crossval import PARTS, PARTS_LME, SPACE, SPACE_LME, _changed, fold_of
from context_engine.bench.memory_eval import Row, score


def test_score_pools_tokens_and_counts_per_category():
    rows = [Row("a", "c1", "multi-hop", True, 1000, 100), Row("b", "c1", "temporal", False, 3000, 300),
            Row("c", "c2", "multi-hop", False, 1000, 600)]
    s = score(rows)
    assert (s.kept, s.cases) == (1, 3)
    assert abs(s.reduction - (1 - 1000 / 5000)) < 1e-12
    assert s.by_category == {"multi-hop": (1, 2), "temporal": (0, 1)}


def test_budget_options_keep_the_broad_ratio_and_the_configured_point_is_the_memo_key():
    configured = {"max_snippet_tokens": 2000, "broad_budget": 4000}
    assert options_for(2000, configured) == {}
    assert options_for(1000, configured) == {"max_snippet_tokens": 1000, "broad_budget": 2000}
    assert options_for(1000, {"max_snippet_tokens": 2000, "broad_budget": 0}) == {"max_snippet_tokens": 1000}
    s = score([Row("a", "c1", "temporal", True, 100, 10)])
    assert "| 1,000 | 90.0% | 100.0% | 1/1 |" in table([(1000, s)], ["temporal"])


def test_every_part_can_be_turned_off_by_the_search():
    for parts, space in ((PARTS, SPACE), (PARTS_LME, SPACE_LME)):
        for part, off in parts.items():
            assert space[part][0] == off
    assert _changed({"a": 1, "b": 2}, {"a": 1, "b": 3}) == {"b": 2}


def test_each_option_set_rewrites_in_its_own_sessions(tmp_path):
    """The option sets share one store: under one session id, a later set would read the
    zones the first committed, and every budget of the curve would score alike."""
    from context_engine.bench.memory_eval import Evaluator

    ev = Evaluator([], str(tmp_path))
    a, b = ev.session_id({}, "conv-1"), ev.session_id({"max_snippet_tokens": 800}, "conv-1")
    assert a != b and a == ev.session_id({}, "conv-1") and a.endswith("conv-1")


def test_folds_deal_each_question_type_across_every_fold():
    """LongMemEval's questions each have their own history: they are dealt into folds by
    type, so every fold holds each type and no question is in two folds."""
    cases = [Case(f"lme/{t}{i}", [], meta={"question_id": f"{t}{i}", "question_type": t})
             for t in ("preference", "multi-session", "temporal") for i in range(7)]
    folds = fold_of(cases, 5)
    assert sorted(folds) == sorted(c.id for c in cases) and set(folds.values()) == {f"fold{k}" for k in range(5)}
    for t in ("preference", "multi-session", "temporal"):
        held = [folds[c.id] for c in cases if c.meta["question_type"] == t]
        assert sorted(held.count(f) for f in set(held)) == [1, 1, 1, 2, 2]  # 7 dealt over 5
    assert fold_of(list(reversed(cases)), 5) == folds  # by type and id, not file order
