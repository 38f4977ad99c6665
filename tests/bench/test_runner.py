import asyncio

from context_engine.bench.baselines import none
from context_engine.bench.cases import Case, Probe, request_points
from context_engine.bench.runner import replay_case, run_replay, run_single, summarize
from context_engine.bench.systems import BaselineSystem, build_systems, engine_settings
from context_engine.bench.tally import Tally
from context_engine.proxy.engine.tokens import TokenCounter
from tests.bench.conftest import TEST_REGISTRY, agent_messages

COUNTER = TokenCounter("o200k_base")


def _case(**kw):
    kw.setdefault("probes", (Probe("gate?", "B12", ("B12",)), Probe("filler?", "x", ("DROP-ME",)),
                             Probe("no evidence", "?", ())))
    return Case(id="t/1", messages=agent_messages(), meta={"dataset": "test"}, **kw)


def _single(systems, cases=None):
    return summarize(asyncio.run(run_single(cases or [_case()], systems, [COUNTER])))


def test_request_points_are_user_turns_and_last_tool_results():
    messages = agent_messages()
    assert request_points(messages) == [1, 3, 5, 7]
    parallel = messages[:2] + [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "a"}, {"id": "b"}]},
        {"role": "tool", "tool_call_id": "a", "content": "1"},
        {"role": "tool", "tool_call_id": "b", "content": "2"}]
    assert request_points(parallel) == [1, 4]


def test_engine_without_rules_equals_none():
    out = _single(build_systems(engine_settings(""), kinds=("engine",)))
    assert list(out) == ["none", "engine"]
    assert out["none"]["tokens_after"] == out["engine"]["tokens_after"]
    assert out["engine"]["retention"] == 1.0 and out["engine"]["probes"] == 2
    assert out["engine"]["probes_without_evidence"] == 1


def test_a_dropped_message_is_a_lost_probe_and_a_rule_saving():
    settings = engine_settings("drop_marked", registry=TEST_REGISTRY)
    out = _single(build_systems(settings, kinds=("engine",), registry=TEST_REGISTRY))
    engine = out["engine"]
    dropped = COUNTER.message(agent_messages()[4])
    assert engine["tokens_before"]["o200k_base"] - engine["tokens_after"]["o200k_base"] == dropped
    assert engine["rule_saved"] == {"drop_marked": dropped}
    assert (engine["retained"], engine["probes"], engine["lost_examples"]) == (1, 2, ["t/1"])
    assert engine["invalid"] == 0 and engine["failed_open"] == 0


def test_each_rule_alone_and_a_broken_tool_pair_fails_open():
    settings = engine_settings("drop_marked,drop_first_tool", registry=TEST_REGISTRY)
    systems = build_systems(settings, kinds=("engine", "alone"), registry=TEST_REGISTRY)
    out = _single(systems)
    assert list(out) == ["none", "engine", "drop_marked alone",
                         "drop_first_tool alone"]
    both = out["engine"]
    assert both["failed_open"] == 1 and both["invalid"] == 0
    assert "['c1'] left without results" in both["failed_open_examples"][0]
    assert set(both["rule_latency_ms"]) == {"drop_marked", "drop_first_tool"}
    assert both["tokens_after"] == both["tokens_before"] and both["rule_saved"] == {}
    assert out["drop_marked alone"]["rule_saved"]["drop_marked"] > 0


def test_a_baseline_that_breaks_a_tool_pair_counts_as_invalid():
    def drop_tool(messages):
        return [m for m in messages if m.get("tool_call_id") != "c1"]

    out = _single([BaselineSystem("none", none), BaselineSystem("broken", drop_tool)])
    assert out["broken"]["invalid"] == 1
    assert "without results" in out["broken"]["problem_examples"][0]
    assert out["none"]["invalid"] == 0


def test_replay_of_none_is_fully_stable_and_prices_history_at_the_cache_ratio():
    case = _case()
    tally = Tally()
    asyncio.run(replay_case(case, BaselineSystem("none", none), COUNTER, tally, 0.1))
    points = request_points(case.messages)
    totals = [COUNTER.request(case.messages[:i + 1]) for i in points]
    prev = [0] + [sum(COUNTER.message(m) for m in case.messages[:i + 1]) for i in points[:-1]]
    assert tally.requests == 4 and tally.full_prefix == 3 and tally.prefix_points == 3
    expected = sum(p * 0.1 + (t - p) for p, t in zip(prev, totals))
    assert abs(tally.cost - expected) < 1e-6
    assert tally.stable_shares[0] == 0.0 and all(0 < s < 1 for s in tally.stable_shares[1:])


def test_replay_cost_of_a_moving_window_is_compared_with_none():
    systems = build_systems(engine_settings(""), last_n=2, kinds=("last_n", "mask_observations"))
    out = summarize(asyncio.run(run_replay([_case()], systems, COUNTER, 0.1)))
    assert out["none"]["replay"]["cost_vs_none"] == 1.0
    assert out["none"]["replay"]["full_prefix_share"] == 1.0
    assert out["last_n(2)"]["replay"]["full_prefix_share"] < 1.0
    assert out["mask_observations(3)"]["replay"]["cost_vs_none"] == 1.0  # only two tool outputs


def test_stateful_sessions_are_fresh_per_case():
    settings = engine_settings("drop_marked", registry=TEST_REGISTRY)
    systems = build_systems(settings, kinds=("engine",), registry=TEST_REGISTRY)
    first = systems[1].open("a")
    second = systems[1].open("b")
    # per-session state is fresh; content-addressed caches are shared, as in one proxy
    assert first.engine is not second.engine
    assert first.engine.pipeline.rules[0] is not second.engine.pipeline.rules[0]
    assert first.engine.store is second.engine.store


def test_replay_bills_the_recall_tool_the_proxy_adds_after_a_lossy_rewrite():
    """From the first lossy rewrite on the proxy appends context_recall to ``tools``: the
    OpenAI bill of the rewrite arm counts it (and the whole-prefix miss it causes)."""
    from context_engine.bench import billing
    from context_engine.bench.systems import parse_variant
    from context_engine.proxy.dialects.chat.recall import TOOL

    messages = agent_messages()
    messages[3] = {**messages[3], "content": "log line\n" * 400}  # clipped: lossy
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    case = Case(id="t/recall", messages=messages, tools=tools, meta={"dataset": "test"})
    _, settings = parse_variant("clip:tool_json.max_chars=400", engine_settings("tool_json"))
    system = build_systems(settings, kinds=("engine",))[1]
    tally = Tally()
    asyncio.run(replay_case(case, system, COUNTER, tally, 0.1))

    session = system.open("check")
    sent, client = billing.CaseBill("openai", "a"), billing.CaseBill("openai", "b")
    offered = []
    for i in request_points(messages):
        out = asyncio.run(session.rewrite(messages[: i + 1], tools))
        offered.append(out.tools_sent(tools) != tools)
        assert out.tools_sent(tools) in (tools, [*tools, TOOL])
        sent.add(messages[: i + 1], tools, out, 0, 0, out.tools_sent(tools))
        client.add(messages[: i + 1], tools, out, 0, 0)
    assert offered == [False, True, True, True]
    assert sent.billed > client.billed
    assert abs(tally.bills["openai"].billed - sent.billed) < 1e-12


def test_a_tool_less_chat_offered_the_recall_tool_is_billed_for_it():
    """``--recall`` offers context_recall to a chat that sent no tools (the question of
    issue 26): the tool goes out as the request's only tool, and the bill counts it."""
    from context_engine.bench.systems import parse_variant
    from context_engine.proxy.dialects.chat.recall import TOOL

    messages = [{"role": "user", "content": "Hi, I am Ann."}]
    for i in range(40):
        messages += [{"role": "assistant", "content": f"Noted, fact {i}: " + "detail " * 40},
                     {"role": "user", "content": f"Fact {i + 1}: " + "more " * 40}]
    _, settings = parse_variant("small:budget.max_input_tokens=1500", engine_settings("budget"))
    system = build_systems(settings, kinds=("engine",))[1]
    system.recall = True
    out = asyncio.run(system.open("chat").rewrite(messages, None))
    assert out.recall is not None and out.recall.offer
    assert out.tools_sent(None) == [TOOL]


def test_caller_scope_shares_the_provider_cache_between_sessions():
    """``--cache-scope caller``: a second session of the same agent reads the tool schemas
    and system prompt the first one wrote (the provider's cache is per organisation);
    ``session`` starts each replayed session cold. The rewrite arm shares the same way."""
    system_prompt = {"role": "system", "content": "Policy. " + " ".join(f"rule{i} holds" for i in range(900))}

    def case(n: int) -> Case:
        messages = [system_prompt] + agent_messages()[1:]
        messages[1] = {**messages[1], "content": f"session {n}: " + messages[1]["content"]}
        return Case(id=f"t/{n}", messages=messages, meta={"dataset": "test"})

    systems = build_systems(engine_settings("fold_duplicates"), kinds=("engine",))
    bills = {}
    for scope in ("session", "caller"):
        tallies = asyncio.run(run_replay([case(1), case(2)], systems, COUNTER, 0.1,
                                         anthropic=True, cache_scope=scope))
        bills[scope] = {k: (b.direct, b.billed, b.requests) for k, b in tallies["engine"].bills.items()}
    for kind in ("openai", "anthropic"):
        (d_s, b_s, n_s), (d_c, b_c, n_c) = bills["session"][kind], bills["caller"][kind]
        assert n_s == n_c == 8
        assert d_c < d_s and b_c < b_s, kind  # session 2's first request read session 1's prefix


def test_one_request_per_case_opens_a_session_per_system():
    """A variant shares the engine's store: under the engine's session id it would read
    the zones the engine committed for the case instead of building its own."""
    opened = []

    class Recording(BaselineSystem):
        def open(self, session_id, model=None):
            opened.append(session_id)
            return super().open(session_id, model)

    _single([Recording("a", none), Recording("b", none)])
    assert len(set(opened)) == 2 and all("t/1" in s for s in opened)


def test_the_bill_names_the_session_billed_highest_against_its_direct_bill():
    from context_engine.bench.billing import BillTotals, CaseBill

    totals = BillTotals()
    for name, direct, billed in (("a", 10.0, 6.0), ("b", 4.0, 4.4), ("c", 0.0, 0.0)):
        case = CaseBill("openai", name)
        case.direct, case.billed = direct, billed
        totals.add(case)
    out = totals.summary()
    assert out["worst_session"] == {"case": "b", "cost_vs_direct": 1.1}
    assert out["cost_vs_direct"] == round(10.4 / 14.0, 4)
