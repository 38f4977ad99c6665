"""Where rewrites run (``context_engine.proxy.engine.lanes`` through ``Engine``): one session in order, sessions in
parallel, background work in its own lane, bounded queues, the rules deadline.

No timed assertions: rules block on events the test releases, and the order things
happen in is what is checked."""

from __future__ import annotations

import asyncio
import dataclasses
import threading

import pytest

from context_engine.proxy.engine.context import RequestContext
from context_engine.proxy.engine.engine import Engine
from context_engine.proxy.engine.lanes import BackgroundLane, RequestLane
from context_engine.proxy.settings import load_settings
from context_engine.proxy.store.stores import MemoryStore
from tests.fakes.rules import NoConfig

WAIT = 30  # seconds an event may take before a test gives up (never reached when it passes)


class Gate:
    """A rule that records when each request starts and ends, and holds a request whose
    last message names a gate until the test opens it."""

    name = "gate"
    Config = NoConfig

    def __init__(self) -> None:
        self.log: list[str] = []
        self.lock = threading.Lock()
        self.gates: dict[str, threading.Event] = {}
        self.started: dict[str, threading.Event] = {}

    def gate(self, key: str) -> threading.Event:
        self.started.setdefault(key, threading.Event())
        return self.gates.setdefault(key, threading.Event())

    async def apply(self, ctx: RequestContext) -> RequestContext:
        key = ctx.messages[-1]["content"]
        with self.lock:
            self.log.append(f"start {key}")
        if key in self.started:
            self.started[key].set()
        if key in self.gates:
            assert self.gates[key].wait(WAIT), f"gate {key} never opened"
        with self.lock:
            self.log.append(f"end {key}")
        msgs = [*ctx.messages[:-1], {"role": "assistant", "content": f"seen {key}"}, ctx.messages[-1]]
        return ctx.replace(messages=msgs)


def engine_with(rule: Gate, **options) -> Engine:
    settings = load_settings(flags={"rules": "", "store": "memory://"}, env={})
    settings = dataclasses.replace(settings, **{"rules_deadline_ms": 0.0, "rule_workers": 2,
                                                **options})
    return Engine(settings, store=MemoryStore(), rules=[rule])


def body(key: str) -> dict:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": key}]}


def test_one_sessions_rewrites_run_in_arrival_order():
    rule = Gate()
    hold = rule.gate("a1")
    engine = engine_with(rule, rule_workers=4)

    async def go():
        first = asyncio.ensure_future(engine.rewrite_off_loop(body("a1"), "A"))
        await asyncio.to_thread(rule.started["a1"].wait, WAIT)
        later = [asyncio.ensure_future(engine.rewrite_off_loop(body(f"a{i}"), "A")) for i in (2, 3)]
        await asyncio.sleep(0)  # the later ones are queued behind a1, which is held
        hold.set()
        return await asyncio.gather(first, *later)

    try:
        results = asyncio.run(go())
    finally:
        engine.close()
    assert rule.log == ["start a1", "end a1", "start a2", "end a2", "start a3", "end a3"]
    assert all(r.result.changed and not r.result.failed_open for r in results)


def test_different_sessions_run_in_parallel():
    rule = Gate()
    hold_a = rule.gate("a")
    rule.gate("b")  # records when b starts

    async def go(engine: Engine):
        a = asyncio.ensure_future(engine.rewrite_off_loop(body("a"), "A"))
        await asyncio.to_thread(rule.started["a"].wait, WAIT)
        rule.gates["b"].set()
        b = await engine.rewrite_off_loop(body("b"), "B")  # done while a is still held
        log = list(rule.log)
        hold_a.set()
        await a
        return b, log

    engine = engine_with(rule)
    try:
        b, log = asyncio.run(go(engine))
    finally:
        engine.close()
    assert log == ["start a", "start b", "end b"] and not b.result.failed_open


def test_background_work_never_holds_up_a_request():
    rule = Gate()
    engine = engine_with(rule)
    blocked = threading.Event()
    entered = threading.Event()

    def slow_background_job() -> None:
        entered.set()
        assert blocked.wait(WAIT)

    async def go():
        assert engine.background.submit(slow_background_job)
        await asyncio.to_thread(entered.wait, WAIT)
        return await engine.rewrite_off_loop(body("x"), "S")

    try:
        result = asyncio.run(go())
        assert result.result.changed and not blocked.is_set()  # done while background is busy
    finally:
        blocked.set()
        engine.close()


def test_background_pause_waits_for_running_requests():
    requests = RequestLane(2, 8)
    lane = BackgroundLane(4, requests, pause_s=WAIT)
    release, running, paused = threading.Event(), threading.Event(), threading.Event()
    order: list[str] = []

    def request() -> None:
        running.set()
        assert release.wait(WAIT)
        order.append("request done")

    def background() -> None:
        paused.set()
        lane.pause()  # a request is running: wait for it
        order.append("background step")

    try:
        requests.submit("S", request)
        assert running.wait(WAIT)
        lane.submit(background)
        assert paused.wait(WAIT)
        release.set()
        assert lane.wait_idle(WAIT)
        assert order == ["request done", "background step"]
    finally:
        release.set()
        requests.close()
        lane.close()


def test_request_lane_is_bounded_and_sheds_to_the_original():
    rule = Gate()
    hold = rule.gate("held")
    engine = engine_with(rule, rules_queue=2, rule_workers=1)

    async def go():
        first = asyncio.ensure_future(engine.rewrite_off_loop(body("held"), "A", caller="a"))
        await asyncio.to_thread(rule.started["held"].wait, WAIT)
        second = asyncio.ensure_future(engine.rewrite_off_loop(body("q"), "B", caller="b"))
        await asyncio.sleep(0)
        third = await engine.rewrite_off_loop(body("shed"), "C", caller="c")  # the lane holds 2
        hold.set()
        return await first, await second, third

    try:
        first, second, third = asyncio.run(go())
    finally:
        engine.close()
    assert not first.result.failed_open and not second.result.failed_open
    assert third.result.failed_open and not third.result.changed
    assert third.result.problems == ["rules lane full"]
    assert engine.lane_stats()["shed"] == 1 and "start shed" not in rule.log


def test_background_queue_is_bounded_and_drops():
    lane = BackgroundLane(1)
    release, entered = threading.Event(), threading.Event()
    try:
        def hold() -> None:
            entered.set()
            release.wait(WAIT)

        assert lane.submit(hold)
        assert entered.wait(WAIT)
        assert not lane.submit(lambda: None)
        assert lane.dropped == 1
    finally:
        release.set()
        lane.close()


def test_deadline_sends_the_original_and_counts_it():
    rule = Gate()
    hold = rule.gate("slow")
    engine = engine_with(rule, rules_deadline_ms=50.0)

    async def go():
        slow = await engine.rewrite_off_loop(body("slow"), "A")  # held past the deadline
        queued = asyncio.ensure_future(engine.rewrite_off_loop(body("next"), "A"))
        late = await queued  # behind the held one: its deadline passes while it waits
        hold.set()
        await asyncio.to_thread(engine.requests.close)
        return slow, late

    try:
        slow, late = asyncio.run(go())
    finally:
        hold.set()
        engine.close()
    for r in (slow, late):
        assert r.result.failed_open and not r.result.changed
        assert r.result.ctx.messages == body(r.result.ctx.messages[-1]["content"])["messages"]
    assert slow.result.problems == ["rules_deadline_ms passed"]
    assert engine.lane_stats()["deadline"] == 2
    assert "start next" not in rule.log  # abandoned before it started: skipped, not run late


def test_no_deadline_within_it():
    rule = Gate()
    engine = engine_with(rule, rules_deadline_ms=60_000.0)
    try:
        r = asyncio.run(engine.rewrite_off_loop(body("quick"), "A"))
    finally:
        engine.close()
    assert r.result.changed and not r.result.failed_open and engine.lane_stats()["deadline"] == 0


def test_a_long_request_gets_a_longer_deadline():
    """The deadline grows with the body (bytes / 4 as tokens), up to its cap: a rewrite
    held 300 ms fails open on a short request and goes through on a 120k-token one."""
    rule = Gate()
    engine = engine_with(rule, rules_deadline_ms=100.0, rules_deadline_per_10k_tokens_ms=60.0,
                         rules_deadline_max_ms=900.0)
    assert engine.deadline_for(0) == pytest.approx(0.1)
    assert engine.deadline_for(480_000) == pytest.approx(0.82)  # 120k tokens: 100 + 12 × 60 ms
    assert engine.deadline_for(10**9) == pytest.approx(0.9)  # capped

    async def held(key: str, size: int):
        timer = threading.Timer(0.3, rule.gate(key).set)
        timer.start()
        try:
            return await engine.rewrite_off_loop(body(key), key, size=size)
        finally:
            timer.join()

    try:
        short = asyncio.run(held("short", 100))
        long = asyncio.run(held("long", 480_000))
    finally:
        engine.close()
    assert short.result.failed_open and short.result.problems == ["rules_deadline_ms passed"]
    assert long.result.changed and not long.result.failed_open


@pytest.mark.parametrize("bad", [{"rules_deadline_ms": -1}, {"rules_queue": 0}, {"rule_workers": -2},
                                 {"rules_deadline_per_10k_tokens_ms": -5}, {"rules_deadline_max_ms": -1}])
def test_bad_lane_settings_stop_start_up(bad):
    from context_engine.proxy.settings import ConfigError

    key, value = next(iter(bad.items()))
    with pytest.raises(ConfigError, match=key):
        load_settings(flags={key: value}, env={})


def test_closing_skips_queued_rewrites_and_waits_for_the_running_one():
    lane = RequestLane(1, 8)
    release, running = threading.Event(), threading.Event()
    ran: list[str] = []

    def held() -> str:
        running.set()
        assert release.wait(WAIT)
        ran.append("held")
        return "held"

    first = lane.submit("A", held)
    assert running.wait(WAIT)
    queued = [lane.submit("A", lambda: ran.append("a2")), lane.submit("B", lambda: ran.append("b"))]
    assert first is not None and None not in queued
    jobs = [j for j in queued if j is not None]
    closer = threading.Thread(target=lane.close)
    closer.start()
    while not all(j.abandoned for j in jobs):  # close() marks them before it waits
        threading.Event().wait(0.01)
    release.set()
    closer.join(WAIT)
    assert not closer.is_alive() and ran == ["held"] and first.future.result() == "held"
    assert all(j.future.result() is None for j in jobs) and lane.queued == 0


def test_a_caller_gets_no_more_than_its_share_of_the_queue():
    lane = RequestLane(1, 8)
    gate, started = threading.Event(), threading.Event()

    def held() -> None:
        started.set()
        assert gate.wait(WAIT)

    try:
        jobs = [lane.submit(f"a{i}", held, caller="flood") for i in range(8)]
        assert sum(j is not None for j in jobs) == 4  # half the queue
        assert lane.submit("b", lambda: "b", caller="other") is not None
    finally:
        gate.set()
        lane.close()


def test_workers_take_callers_in_turn():
    """One worker; caller A queued many sessions first, B one: B's job waits for at most
    one more of A's (the one queued while A's first ran), not for all of them."""
    lane = RequestLane(1, 64)
    gate, order = threading.Event(), list[str]()
    lock = threading.Lock()

    def job(name: str, wait: bool = False):
        def run() -> None:
            if wait:
                assert gate.wait(WAIT)
            with lock:
                order.append(name)
        return run

    try:
        first = lane.submit("a0", job("a0", wait=True), caller="A")
        rest = [lane.submit(f"a{i}", job(f"a{i}"), caller="A") for i in range(1, 6)]
        b = lane.submit("b0", job("b0"), caller="B")
        gate.set()
        for j in [first, *rest, b]:
            assert j is not None
            j.future.result(WAIT)
    finally:
        lane.close()
    assert order[0] == "a0" and order.index("b0") <= 2 and sorted(order) == sorted(["b0"] + [f"a{i}" for i in range(6)])


def test_a_rewrite_past_the_deadline_stops_before_its_next_rule():
    """The client got the original once the deadline passed: later rules do not run."""
    first, second = Gate(), Gate()
    second.name = "second"
    hold = first.gate("slow")
    settings = load_settings(flags={"rules": "", "store": "memory://"}, env={})
    settings = dataclasses.replace(settings, rules_deadline_ms=50.0, rule_workers=1)
    engine = Engine(settings, store=MemoryStore(), rules=[first, second])
    try:
        async def go():
            out = await engine.rewrite_off_loop(body("slow"), "A")  # passes the deadline
            assert out.result.failed_open
            hold.set()
            engine.requests.wait_idle(WAIT)
        asyncio.run(go())
        engine.requests.close()
        assert "end slow" in first.log and second.log == []
    finally:
        hold.set()
        engine.close()
