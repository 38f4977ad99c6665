"""The honest bill: counterfactual cache use of the original requests, prefix
diagnostics and bad cache input, through the real server and the mock upstream (which
caches like OpenAI: the longest shared token prefix from 1,024 in 128-token steps)."""

from __future__ import annotations

import json

from context_engine.proxy.billing.row_bill import row_bill
from context_engine.proxy.reporting.aggregate import cache_breaks, overall
from tests.fakes.rules import FoldEveryThird, Noop
from tests.fakes.upstreams import ChatUpstream, completion

WORDS = ("harbour lantern quarry velvet orchid turbine meadow cobalt ember saffron "
         "glacier tundra pylon mosaic falcon cipher").split()


def _text(i: int, n: int = 260) -> str:
    return " ".join(WORDS[(i * 7 + k * 3) % len(WORDS)] + str((i * k) % 97) for k in range(n))


def conversation(turns: int, salt: str) -> list[list[dict]]:
    """The request of each turn of one growing conversation (about 600 tokens a turn).
    The mock's cache is shared by every test (like a provider's, per organisation), so
    each test salts its conversation."""
    msgs: list[dict] = [{"role": "system", "content": f"You are terse ({salt}). " + _text(0, 120)}]
    out = []
    for t in range(1, turns + 1):
        msgs = msgs + [{"role": "user", "content": f"Question {t}: " + _text(t)}]
        out.append(msgs)
        msgs = msgs + [{"role": "assistant", "content": f"Answer {t}: " + _text(100 + t, 150)}]
    return out


def _send(proxy, requests, session: str, model: str = "gpt-5"):
    client = proxy.client(default_headers={"X-Session-Id": session})
    for msgs in requests:
        client.chat.completions.create(model=model, messages=msgs)
    return [r for r in proxy.rows() if r["session"].startswith(session + "~")]


def test_unchanged_requests_estimate_matches_the_bill(start_proxy):
    rows = _send(start_proxy(), conversation(8, "same"), "same")
    assert [r["billing"] for r in rows] == ["openai"] * 8
    assert rows[0]["est_cached_original"] == 0 and rows[-1]["est_cached_original"] > 3000
    total = overall(rows)
    assert total.original_estimate == 8
    # the estimate (message boundaries, the proxy's token counts) against what the mock
    # billed (a token-level prefix match over JSON-serialised messages, ~4 tokens more per
    # message than the prompt count): within a few percent of the cost
    assert abs(total.cost_original / total.cost_actual - 1) < 0.05
    assert total.cache_breaks == 0 and rows[-1]["prefix_kept_tokens"] > 3000


def test_rewrite_is_priced_against_what_the_original_would_have_cached(start_proxy):
    proxy = start_proxy(rules=[Noop(), FoldEveryThird()])
    rows = _send(proxy, conversation(9, "fold"), "fold")
    breaks = [r for r in rows if r["prefix_break_index"] is not None]
    assert breaks, "the summary changes every third turn"
    assert {r["prefix_break_rule"] for r in breaks} == {"fold_every_third"}
    assert all(r["prefix_break_index"] == 2 for r in breaks)  # the summary follows the task
    for r in breaks:  # the original kept its prefix: the estimate reads what the rewrite missed
        assert r["est_cached_original"] > r["cached_tokens"]
    total = overall(rows)
    old_formula = sum(((r["prompt_tokens"] + r["tokens_original"] - r["tokens_sent"]
                        - r["cached_tokens"]) * 1.25 + r["cached_tokens"] * 0.125) for r in rows)
    assert total.cost_original < old_formula * 1e-6  # the old report overstated the original
    assert cache_breaks(rows)[0]["cause"] == "fold_every_third"


def test_client_edits_are_blamed_on_the_client(start_proxy):
    proxy = start_proxy(rules=[Noop()])
    reqs = conversation(3, "edit")
    edited = [dict(m) for m in reqs[2]]
    edited[1] = {"role": "user", "content": "Question 1, reworded: " + _text(1)}
    rows = _send(proxy, reqs[:2] + [edited], "edit")
    assert rows[2]["prefix_break_index"] == 1 and rows[2]["prefix_break_rule"] == "client"


def test_passthrough_rows_compare_the_estimate_with_the_bill(start_proxy):
    proxy = start_proxy(mode="ab", ab_share=0.0)
    rows = _send(proxy, conversation(6, "ab"), "ab")
    assert {r["arm"] for r in rows} == {"passthrough"}
    bills = [row_bill(r) for r in rows]
    assert {b.basis if b else None for b in bills} == {"billed"}
    total = overall(rows)
    assert total.check_requests == 6 and total.check_error_pct is not None
    assert abs(total.check_error_pct) < 3


def test_bad_cache_input_passes_through_and_is_noted(start_proxy, mock):
    proxy = start_proxy()
    parts = [{"type": "text", "text": f"part {i}", "cache_control": {"type": "ephemeral"}}
             for i in range(5)]
    parts.append({"type": "weird", "cache_control": {"type": "ephemeral"}})
    body = {"model": "gpt-5", "messages": [{"role": "user", "content": parts}]}
    raw = json.dumps(body).encode()
    import httpx

    r = httpx.post(proxy.url + "/v1/chat/completions", content=raw,
                   headers={"content-type": "application/json", "x-session-id": "bad"})
    assert r.status_code == 200
    assert mock.received[-1].body == raw
    row = proxy.rows()[-1]
    assert "6 cache_control breakpoints" in row["cache_notes"]
    assert "'weird' part" in row["cache_notes"]


def _odd_usage_upstream(usage: object) -> ChatUpstream:
    return ChatUpstream(lambda up, body: completion("hi", "gpt-5", usage, id="x"))


def test_malformed_usage_is_noted_never_a_500(start_proxy):
    cases = [
        ({"prompt_tokens": 100, "completion_tokens": 2,
          "prompt_tokens_details": {"cached_tokens": 10**6}}, "> prompt_tokens"),
        ({"prompt_tokens": "lots", "completion_tokens": -1}, "is not a count"),
        ("usage as a string", "not an object"),
        ({"prompt_tokens": 10, "prompt_tokens_details": [1]}, "not an object"),
    ]
    for usage, note in cases:
        with _odd_usage_upstream(usage) as up:
            proxy = start_proxy(upstream=up.url + "/v1")
            client = proxy.client()
            out = client.chat.completions.create(model="gpt-5", messages=[
                {"role": "user", "content": "hi"}])
            assert out.choices[0].message.content == "hi"
            row = proxy.rows()[-1]
            assert note in row["cache_notes"], (usage, row["cache_notes"])
            assert row_bill(row) is not None


def test_cache_writes_are_read_from_usage_and_billed_at_the_write_price(start_proxy):
    usage = {"prompt_tokens": 3000, "completion_tokens": 10, "cache_creation_input_tokens": 2000,
             "prompt_tokens_details": {"cached_tokens": 500}}
    with _odd_usage_upstream(usage) as up:
        proxy = start_proxy(upstream=up.url + "/v1")
        proxy.client().chat.completions.create(model="claude-sonnet-4-5", messages=[
            {"role": "user", "content": "hi"}])
        row = proxy.rows()[-1]
    assert row["cache_write_tokens"] == 2000 and row["cached_tokens"] == 500
    assert row["billing"] == "anthropic" and not row["cache_notes"]
    bill = row_bill(row)
    assert bill is not None and bill.actual is not None
    expected = 500 * 3e-7 + 2000 * 3.75e-6 + 500 * 3e-6 + 10 * 1.5e-5
    assert abs(bill.actual - expected) < 1e-12


def test_report_stats_and_metrics_label_estimate_and_billed(start_proxy):
    import httpx
    from rich.console import Console

    from context_engine.proxy.reporting.report import build, render

    proxy = start_proxy(rules=[FoldEveryThird()])
    rows = _send(proxy, conversation(8, "views"), "views")
    data = build(rows, "model")
    assert data["overall"]["cost_original_basis"] == "estimate"
    assert data["cache_breaks"][0]["cause"] == "fold_every_third"
    console = Console(width=200, record=True)
    for part in render(data):
        console.print(part)
    text = console.export_text()
    assert "(estimate) →" in text and "(billed)" in text
    assert "Cache breaks by rule" in text and "fold_every_third" in text
    stats = httpx.get(proxy.url + "/stats").json()
    assert stats["cache_breaks"][0]["cause"] == "fold_every_third"
    assert stats["overall"]["est_cached_original"] > stats["overall"]["cached_tokens"]
    metrics = httpx.get(proxy.url + "/metrics").text
    assert 'context_engine_cost_usd_total{basis="estimate",cost="original",model="gpt-5"}' in metrics
    assert 'context_engine_cache_breaks_total{cause="fold_every_third"}' in metrics


def test_a_provider_that_misses_a_kept_prefix_is_reported(start_proxy):
    usage = {"prompt_tokens": 5000, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 0}}
    with _odd_usage_upstream(usage) as up:
        proxy = start_proxy(upstream=up.url + "/v1")
        rows = _send(proxy, conversation(4, "miss"), "miss")
    assert rows[0]["provider_missed_tokens"] == 0  # nothing was kept yet
    assert all(r["provider_missed_tokens"] >= 1024 for r in rows[2:])
    assert overall(rows).provider_misses >= 2


def test_a_prefix_another_session_cached_counts_for_the_original(start_proxy):
    """The provider's cache is per organisation: a session's first request reads the prefix
    another session wrote. The session's own history cannot see that; the bill proves it,
    so the original (which shares that prefix with what was sent) is estimated to read it
    too, and the report does not count those reads as a saving."""
    proxy = start_proxy(rules=[Noop()])
    reqs = conversation(3, "fleet")
    _send(proxy, reqs, "fleet-a")
    rows = _send(proxy, reqs[2:], "fleet-b")  # session b opens with what a sent last
    assert rows[0]["cached_tokens"] > 1024
    # in the proxy's token counts (the bill counts ~4 more tokens a message)
    assert rows[0]["est_cached_original"] >= rows[0]["cached_tokens"] * rows[0]["tokens_sent"] \
        // rows[0]["prompt_tokens"] - 1
    total = overall(rows)
    assert abs(total.cost_original / total.cost_actual - 1) < 0.05


def test_recall_rounds_are_the_rewrites_cost_never_the_originals():
    """A rewritten request whose reply needed a recall round: the billed usage holds both
    calls; the original, sent direct, would have made the first alone."""
    base = {"model": "gpt-4o", "arm": "rewrite", "tokens_original": 5000, "tokens_sent": 2000,
            "prompt_tokens": 2000, "cached_tokens": 0, "completion_tokens": 50,
            "est_cached_original": 0, "est_write_original": 0}
    plain = row_bill(base)
    recalled = row_bill({**base, "prompt_tokens": 4300, "cached_tokens": 1900,
                         "completion_tokens": 80, "recall_rounds": 1,
                         "recall_prompt_tokens": 2300, "recall_completion_tokens": 30})
    assert plain is not None and recalled is not None
    assert recalled.original == plain.original  # the same original request
    assert recalled.actual > plain.actual  # the rewrite paid for the round
