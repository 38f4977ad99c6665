"""The scripted careful model of ``bench --recall`` finds the id that names a missing
piece of evidence wherever ``compact`` left it: a cleared result, a cleared assistant
turn, a shortened tool input."""

from __future__ import annotations

import json
from typing import Any

from context_engine.bench.recall_model import named_id
from context_engine.proxy.engine.originals import original_id
from context_engine.rules.compact.inputs import shorten_call
from context_engine.rules.compact.placeholder import CLEARED

SCRIPT = "cat <<'EOF' > repro.py\nimport xarray as xr\nda = xr.DataArray([1, 2])\n" + "x = 1\n" * 80 + "EOF"


def history() -> list[dict[str, Any]]:
    call = {"id": "c1", "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": SCRIPT})}}
    return [{"role": "user", "content": "Fix the merge of attrs."},
            {"role": "assistant", "content": "THOUGHT: I write repro.py first.", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "tests/test_merge.py:551: drop_conflicts"}]


def test_a_shortened_tool_input_is_named_by_its_own_id() -> None:
    msgs = history()
    short, values = shorten_call(msgs[1]["tool_calls"][0], 300, CLEARED)
    sent = [msgs[0], {**msgs[1], "tool_calls": [short]}, msgs[2]]
    assert values == [SCRIPT]
    assert named_id(msgs, sent, "xr.DataArray") == original_id(SCRIPT)


def test_a_cleared_result_is_named_by_its_content_id() -> None:
    msgs = history()
    oid = original_id(msgs[2]["content"])
    sent = [*msgs[:2], {**msgs[2], "content": f"{CLEARED} {oid}"}]
    assert named_id(msgs, sent, "drop_conflicts") == oid
    assert named_id(msgs, msgs[:2], "drop_conflicts") is None  # no marker names it
