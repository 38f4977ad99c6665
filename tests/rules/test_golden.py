"""Every rule's golden cases (tests/golden/<rule>.yaml): the rule, from the registry, with the
case's options turns ``input`` into exactly ``expected``, and the invariants accept it."""

from __future__ import annotations

from typing import Any

import pytest

from context_engine.rules import REGISTRY
from tests.golden_cases import rule_cases, rule_files
from tests.harness import assert_valid_rewrite, run_rule

CASES = [pytest.param(path.stem, case, id=f"{path.stem}: {case['title']}")
         for path in rule_files() for case in rule_cases(path.stem)]


def test_every_golden_file_names_a_registered_rule() -> None:
    assert {path.stem for path in rule_files()} <= set(REGISTRY)
    assert len({path.stem for path in rule_files()}) >= 6


@pytest.mark.parametrize(("rule", "case"), CASES)
def test_golden(rule: str, case: dict[str, Any]) -> None:
    # ``context``: RequestContext fields a case fixes (kind: chat for a chat with tool calls)
    out = run_rule(REGISTRY[rule], case["input"], ctx_kw=case.get("context"), **case["options"])
    assert out.messages == case["expected"]
    assert_valid_rewrite(case["input"], out)
