"""Linear time on request content: pathological text (long runs of one character, of
punctuation, whitespace, digits, CJK, repeated words) costs rules time proportional to
its length, never quadratic or exponential.

Timing without flakiness: each check compares the best of three runs at size n with the
best of three at 4n, in CPU time of this process (other processes on a shared machine do
not count). Linear work grows about 4×, quadratic 16×; the check allows 8× plus a small
absolute slack, and a failed check is measured again (up to three times), so a noisy
moment does not fail it and a quadratic pattern, failing every time, does. A pattern that takes seconds at the small size (exponential backtracking) is
stopped by an alarm and fails at once, instead of hanging the suite.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import itertools
import pkgutil
import re
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest

from context_engine.proxy.engine.context import RequestContext
from context_engine.proxy.engine.contract import RuleDeps
from context_engine.proxy.settings import build_rules, load_settings
from context_engine.proxy.store.stores import MemoryStore
from context_engine.rules.retrieve.embedders import HashingEmbedder

pytestmark = pytest.mark.slow  # large pathological turns, timed per size

GROWTH = 8.0  # allowed time ratio for 4× the input (linear ≈ 4, quadratic ≈ 16)

# Every module of the rules and the proxy, found by walking the packages (a new module's
# patterns are checked without anyone listing it): patterns may see request content.
PACKAGES = ("context_engine.rules", "context_engine.proxy")


def modules() -> list[str]:
    names = []
    for package in PACKAGES:
        path = importlib.import_module(package).__path__
        names += [m.name for m in pkgutil.walk_packages(path, package + ".")]
    return sorted(names)


# One unit repeated, then a tail that makes a match fail at the last moment.
UNITS = ("!", "a", " ", "\n", "7", ".", "好", "嗯", "一", "《", "A", "_", "-", ":", '"', "x ",
         "a1", "Ab ", "a.", "1,", "a-", "@", "\t", "janjan", "帮我", "k", "<", "< ", "&lt;",
         "Hello World ")
TAILS = ("", "x", "!", " ", "\x00", "1", "?")


class TooSlow(Exception):
    pass


def _alarm(*_: Any) -> None:
    raise TooSlow()


def best_time(fn: Callable[[], Any], limit: float = 60.0, repeat: int = 3) -> float:
    """Best of ``repeat`` runs of ``fn`` (its own figure when it returns one, to leave
    set-up out); raises TooSlow past ``limit`` seconds."""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        best = float("inf")
        for _ in range(repeat):
            start = time.process_time()
            took = fn()
            best = min(best, took if isinstance(took, float) else time.process_time() - start)
        return best
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def grows_linearly(run: Callable[[int], Any], n: int, slack: float) -> tuple[bool, str]:
    detail = ""
    for _ in range(3):
        try:
            small = best_time(lambda: run(n))
            large = best_time(lambda: run(4 * n))
        except TooSlow:
            return False, "timed out"
        detail += f" {small:.4f}s at {n}, {large:.4f}s at {4 * n};"
        if large <= GROWTH * small + slack:
            return True, detail
    return False, detail


def text(unit: str, n: int, tail: str = "") -> str:
    return (unit * (n // len(unit) + 1))[:n] + tail


def patterns() -> list[tuple[str, re.Pattern[str]]]:
    found = []
    for name in modules():
        module = importlib.import_module(name)
        found += [(f"{name}.{k}", v) for k, v in vars(module).items() if isinstance(v, re.Pattern)]
    return found


def test_the_patterns_checked_include_every_module_of_the_rules_and_the_proxy():
    checked = {name.rsplit(".", 1)[0] for name, _ in patterns()}
    assert {"context_engine.proxy.engine.recall_marks", "context_engine.rules.tool_json.line_repeats",
            "context_engine.rules.fold_duplicates.patterns"} <= checked


@pytest.mark.parametrize("name,pattern", patterns(), ids=[n for n, _ in patterns()])
def test_every_pattern_is_linear_on_pathological_text(name, pattern):
    def run(n: int) -> None:
        for unit, tail in itertools.product(UNITS, TAILS):
            s: Any = text(unit, n, tail)
            if isinstance(pattern.pattern, bytes):  # a pattern over wire bytes
                s = s.encode("utf-8")
            pattern.findall(s)
            pattern.match(s)
            pattern.fullmatch(s)

    ok, detail = grows_linearly(run, 1500, slack=0.05)
    assert ok, f"{name} /{pattern.pattern[:80]}/ grows super-linearly: {detail}"


# --- the rules, through the pipeline's rule list ----------------------------------------

ALL_RULES = "fold_duplicates,tool_json,summarize,retrieve,zones,budget"
OPTIONS: dict[str, dict[str, Any]] = {
    "summarize": {"min_tokens": 0, "window": 2, "block": 2},
    "retrieve": {"min_closed_tokens": 0, "min_drop_ratio": 0.0, "embedder": "hashing",
                 "gate": "always", "window": 2, "block": 2},
    "budget": {"max_input_tokens": 2000},
    "zones": {"wrap_user": True},
}


def rules() -> list[Any]:
    settings = load_settings(flags={"rules": ALL_RULES, "store": "memory://"}, env={},
                             config_path="config.yaml")
    merged = {k: {**settings.rule_options.get(k, {}), **v} for k, v in OPTIONS.items()}
    settings = dataclasses.replace(settings, rule_options={**settings.rule_options, **merged})
    deps = RuleDeps(store=MemoryStore(), embedder=HashingEmbedder())
    return build_rules(settings, deps)


def conversation(payload: str, where: str) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful agent."}]
    msgs += [{"role": "user", "content": "Please look up order HAT-1234 for me."},
             {"role": "assistant", "content": None, "tool_calls": [
                 {"id": "c1", "type": "function",
                  "function": {"name": "get_order", "arguments": '{"id": "HAT-1234"}'}}]},
             {"role": "tool", "tool_call_id": "c1",
              "content": payload if where == "tool" else '{"status": "shipped"}'},
             {"role": "assistant", "content": payload if where == "assistant" else "Shipped."}]
    for i in range(6):
        msgs += [{"role": "user", "content": payload if where == "user" and i == 0 else
                  f"Thanks. What about order {i} from May {i + 1}, 2023, to Paris?"},
                 {"role": "assistant", "content": f"Order {i} costs {i * 10} dollars; Alice "
                  "booked it."}]
    last = payload if where == "last_user" else "What did you say about HAT-1234 first?"
    msgs.append({"role": "user", "content": last})
    return msgs


def rule_time(rule_list: list[Any], messages: list[Any]) -> float:
    """Seconds the rules take over ``messages``, one after the other as the pipeline runs them."""
    ctx = RequestContext(messages=messages, model="gpt-4o", session_id="s", original=messages)
    took = 0.0
    for rule in rule_list:
        start = time.process_time()
        ctx = asyncio.run(rule.apply(ctx))
        took += time.process_time() - start
    return took


SALT = itertools.count()
PAYLOADS = ("!", "a", " ", "\n", "7", ".", "好", "嗯", "Hello World ", "a1_", "《", "<",
            "帮我", "x: ", "{\"a\":")


@pytest.mark.parametrize("where", ["assistant", "user", "tool", "last_user"])
@pytest.mark.parametrize("unit", PAYLOADS, ids=[repr(u) for u in PAYLOADS])
def test_rules_take_linear_time_on_pathological_turns(unit, where):
    rule_list = rules()
    rule_time(rule_list, conversation("warm up", where))

    def run(n: int) -> float:
        # fresh rules and store each time: nothing cached from an earlier run
        # and a new text each time: memoised helpers must not hide the cost
        return rule_time(rules(), conversation(text(unit, n, f"x{next(SALT)}"), where))

    ok, detail = grows_linearly(run, 25_000, slack=0.25)
    assert ok, f"{unit!r} in {where}: {detail}"


def test_a_hundred_thousand_repeated_characters_stay_well_under_a_second_each():
    """A generous absolute guard (the bench measures real figures): 100k characters of
    each pathological kind in an old assistant turn cost far less than 2 s of rules."""
    rule_list = rules()
    rule_time(rule_list, conversation("warm up", "assistant"))
    for unit in ("!", "a", " ", "7", "好", "嗯"):
        payload = text(unit, 100_000, f"x{next(SALT)}")
        took = best_time(lambda: rule_time(rules(), conversation(payload, "assistant")), repeat=1)  # noqa: B023 (called at once)
        assert took < 2.0, f"{unit!r}: {took:.2f}s"
