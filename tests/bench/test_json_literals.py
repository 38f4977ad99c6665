"""tool_json changes no literal a next call can use (issue 48, part 3): every key, string
value and number of every JSON result, and every identifier of every text result, of the
dev sessions is still findable, as an agent writes it, in the request the rule sends."""

from __future__ import annotations

import pytest

from context_engine.bench import cases as cases_mod
from context_engine.bench.json_literals import Survival, check_case, findable, literals
from context_engine.rules.tool_json.rule import ToolJsonConfig
from tests.conftest import needs_data


def survival(name: str, config: ToolJsonConfig) -> Survival:
    found = Survival()
    for case in cases_mod.load_cases(cases_mod.resolve_file(name), dedupe=True):
        check_case(case.messages, config, case.id, found)
    return found


def test_literals_are_read_as_written() -> None:
    text = '{"id": "#W1", "price": 10.50, "n": 1e3, "tags": ["a/b", "caf\\u00e9"], "k": null}'
    assert literals(text) == ["10.50", "1e3", "id", "price", "n", "tags", "k", "#W1", "a/b", "café"]
    assert findable("café", 'name:"caf\\u00e9"') and findable('say "hi"', 'x:"say \\"hi\\""')
    assert not findable("10.50", "price:10.5")


def test_every_literal_of_the_tool_sessions_survives_the_defaults() -> None:
    found = survival("long_tools", ToolJsonConfig())
    assert found.literals > 100_000
    assert not found.missing, found.examples[:5]


def test_the_check_sees_a_clip_that_loses_literals() -> None:
    found = survival("long_tools", ToolJsonConfig(max_chars=3000))
    assert found.missing["clipped"] > 0 and not found.missing["notation"]


@needs_data("agent_traces_dev.jsonl", "long_traces_dev.jsonl")
@pytest.mark.parametrize("name", ["agent_traces", "long_traces"])
def test_every_literal_of_the_shared_dev_traces_survives(name: str) -> None:
    found = survival(name, ToolJsonConfig())
    assert found.literals > 1000 and not found.missing, found.examples[:5]
