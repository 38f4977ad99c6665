from hypothesis import given, settings
from hypothesis import strategies as st

from context_engine.bench.baselines import last_n, mask_observations, none, placeholder
from context_engine.proxy.engine.invariants import rewrite_problems
from tests.bench.conftest import SYSTEM, agent_messages, tool_call


def test_none_is_the_request_as_sent():
    messages = agent_messages()
    assert none(messages) == messages and none(messages) is not messages


def test_last_n_keeps_system_and_last_n_messages():
    messages = [SYSTEM] + [{"role": "user" if i % 2 else "assistant", "content": f"m{i}"}
                           for i in range(1, 21)]
    out = last_n(messages, 4)
    assert out == [SYSTEM] + messages[-4:]


def test_last_n_widens_to_the_tool_call_of_a_tool_result():
    messages = agent_messages()  # ..., user "And the gate?", assistant call c2, tool c2
    out = last_n(messages, 1)
    assert out == [SYSTEM, messages[5], messages[6], messages[7]]
    assert rewrite_problems(messages, out, pins=False) == []


def test_last_n_keeps_the_last_user_turn_outside_the_window():
    messages = agent_messages() + [
        {"role": "assistant", "content": "Checking more."},
        {"role": "assistant", "content": None, "tool_calls": [tool_call("c3")]},
        {"role": "tool", "tool_call_id": "c3", "content": "done"},
    ]
    out = last_n(messages, 2)
    assert out == [SYSTEM, messages[5], messages[-2], messages[-1]]


def test_mask_observations_masks_all_but_the_last_k_tool_outputs():
    messages = agent_messages()
    out = mask_observations(messages, keep=1)
    masked = placeholder(messages[3]["content"])
    assert out[3] == {"role": "tool", "tool_call_id": "c1", "content": masked}
    assert out[7] is messages[7]
    assert messages[3]["content"].startswith('{"booking"'), "input was mutated"
    assert mask_observations(messages, keep=3) == messages


def _unit(draw_kind: int, i: int) -> list[dict]:
    if draw_kind == 0:
        return [{"role": "user", "content": f"question {i}"}]
    if draw_kind == 1:
        return [{"role": "assistant", "content": f"answer {i}"}]
    calls = [tool_call(f"c{i}_{k}") for k in range(draw_kind - 1)]
    return [{"role": "assistant", "content": None, "tool_calls": calls}] + [
        {"role": "tool", "tool_call_id": c["id"], "content": f"out {i}\nline"} for c in calls]


conversations = st.lists(st.integers(min_value=0, max_value=4), min_size=1, max_size=25).map(
    lambda kinds: [SYSTEM, {"role": "user", "content": "task"}]
    + [m for i, k in enumerate(kinds) for m in _unit(k, i)])


@settings(max_examples=60, deadline=None)
@given(conversations, st.integers(min_value=1, max_value=15))
def test_baselines_always_give_a_valid_request(messages, n):
    for out in (last_n(messages, n), mask_observations(messages, n % 4)):
        assert rewrite_problems(messages, out, pins=False) == []
    assert len(last_n(messages, n)) <= len(messages)
    tools = [m for m in mask_observations(messages, 2) if m["role"] == "tool"]
    assert all(m["content"].startswith("[old tool output") for m in tools[:-2])
