"""The built-in task set of ``context-engine eval agent``: small repository chores in a
temp folder, each long enough that ``compact`` fires under the default config.

Three kinds, each made from a seed (values, names and filler change with it):

- ``collect``: read a service config, a ports table and a build log (with release notes
  read in between), then write the three values found into ``deploy/values.env``;
- ``fix_constant``: make ``MAX_BATCH`` in ``src/app/limits.py`` equal the ``batch_limit``
  of ``conf/limits.yaml`` (after reading the modules that use it), with ``edit_file``;
- ``log_question``: name the slowest request of ``logs/api.log`` and the SLO it breaks
  (the rotated log and the runbook read in between), written to ``answers/slowest.txt``.

Each task is the files it starts with, the prompt, the expected files after success, and
the *plan* the built-in model follows (``eval_agent_policy``): tool steps whose arguments
name *facts* (``{budget}``), and where each fact is read from (the output of an earlier
step, by a regex). The model only knows a fact when its text is in the request it is
sent: that is what makes a cleared tool result cost a re-read or a recall.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

WORDS = ("alpha bravo cache delta edge fleet gamma harbor index jetty kernel ledger mirror "
         "node orbit pilot quorum relay shard token uplink vector window yield zone").split()


@dataclass(frozen=True)
class Fact:
    """Values the model reads from the output of plan step ``source``: the named groups
    of ``pattern`` in the last match, or (``pick="max:<group>"``) in the match whose
    group is largest; ``whole``: only a complete output counts (a placeholder does not)."""

    source: int
    pattern: str
    pick: str = "last"
    whole: bool = False


@dataclass(frozen=True)
class Step:
    tool: str
    args: dict[str, str]  # values may name facts: "{budget}"


@dataclass(frozen=True)
class BuiltinTask:
    id: str
    prompt: str
    files: dict[str, str]
    plan: tuple[Step, ...]
    facts: tuple[Fact, ...]
    expected: dict[str, str] = field(default_factory=dict)  # path -> content when solved

    def setup(self, folder: Path) -> None:
        for rel, text in self.files.items():
            path = folder / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")

    def solved(self, folder: Path) -> bool:
        for rel, text in self.expected.items():
            path = folder / rel
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                return False
        return True


def _ident(rng: random.Random, parts: int = 2) -> str:
    return "_".join(rng.choice(WORDS) for _ in range(parts))


def _prose(rng: random.Random, lines: int, prefix: str = "") -> str:
    out = []
    for i in range(lines):
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(9, 16)))
        out.append(f"{prefix}{i + 1}. The {words} path was reviewed; nothing changes here.")
    return "\n".join(out) + "\n"


def _notes(rng: random.Random, title: str, lines: int = 70) -> str:
    return f"# {title}\n\n" + _prose(rng, lines, "- ")


def collect(seed: int) -> BuiltinTask:
    rng = random.Random(f"collect-{seed}")
    budget, port, build = rng.randint(100, 999), rng.randint(20000, 29999), rng.randint(4000, 9999)
    service = rng.choice(WORDS) + "-api"
    keys = sorted({_ident(rng, 3) for _ in range(260)})
    ini = "".join(f"{k} = {rng.randint(1, 5000)}\n" for k in keys[:130])
    ini += f"retry_budget = {budget}\n" + "".join(f"{k} = {rng.randint(1, 5000)}\n" for k in keys[130:])
    ports = "| service | port |\n|---|---|\n" + "".join(
        f"| {w}-{i} | {rng.randint(30000, 39999)} |\n" for i in range(110) for w in [rng.choice(WORDS)])
    ports = ports.replace("|---|---|\n", f"|---|---|\n| {service} | {port} |\n", 1)
    log = "".join(f"build {rng.randint(1000, 3999)} passed stage {rng.choice(WORDS)} in {rng.randint(9, 99)}s\n"
                  for _ in range(160))
    log += f"build {build} FAILED at stage {rng.choice(WORDS)}\n" + "".join(
        f"build {rng.randint(1000, 3999)} passed stage {rng.choice(WORDS)}\n" for _ in range(40))
    files = {"conf/service.ini": ini, "docs/ports.md": ports, "logs/build.log": log,
             **{f"docs/release_{i}.md": _notes(rng, f"Release notes {i}") for i in range(1, 7)}}
    notes = [Step("read_file", {"path": f"docs/release_{i}.md"}) for i in range(1, 7)]
    plan = (Step("list_dir", {"path": "."}), Step("read_file", {"path": "conf/service.ini"}),
            Step("read_file", {"path": "docs/ports.md"}), *notes[:2],
            Step("read_file", {"path": "logs/build.log"}), *notes[2:],
            Step("write_file", {"path": "deploy/values.env",
                                "content": "RETRY_BUDGET={budget}\nPORT={port}\nFAILED_BUILD={build}\n"}),
            Step("read_file", {"path": "deploy/values.env"}))
    facts = (Fact(1, r"(?m)^retry_budget = (?P<budget>\d+)$"),
             Fact(2, rf"\| {service} \| (?P<port>\d+) \|"),
             Fact(5, r"build (?P<build>\d+) FAILED"))
    prompt = (f"Write deploy/values.env with RETRY_BUDGET (retry_budget in conf/service.ini), PORT "
              f"(the port of {service} in docs/ports.md) and FAILED_BUILD (the build that failed in "
              f"logs/build.log); check the release notes in docs/ for overrides first.")
    return BuiltinTask(f"collect-{seed}", prompt, files, plan, facts,
                       {"deploy/values.env": f"RETRY_BUDGET={budget}\nPORT={port}\nFAILED_BUILD={build}\n"})


def _module(rng: random.Random, name: str, uses: str, functions: int = 28) -> str:
    out = [f'"""The {name} module."""\n', f"from app.limits import {uses}\n"]
    for i in range(functions):
        fn = _ident(rng)
        out.append(f"\ndef {fn}_{i}(items):\n    # {' '.join(rng.choice(WORDS) for _ in range(12))}\n"
                   f"    chunk = items[:{uses}]\n    return [x for x in chunk if x != {rng.randint(1, 99)}]\n")
    return "".join(out)


def fix_constant(seed: int) -> BuiltinTask:
    rng = random.Random(f"fix-{seed}")
    old, new = rng.randint(16, 64), rng.randint(65, 256)
    names = sorted({_ident(rng, 2).upper() for _ in range(200)})
    limits = '"""Limits of the app."""\n\n' + "".join(f"{n}_LIMIT = {rng.randint(1, 900)}\n" for n in names[:100])
    limits += f"MAX_BATCH = {old}\n" + "".join(f"{n}_LIMIT = {rng.randint(1, 900)}\n" for n in names[100:])
    yaml = "limits:\n" + "".join(f"  {_ident(rng, 3)}: {rng.randint(1, 900)}\n" for _ in range(150))
    yaml += f"  batch_limit: {new}\n" + "".join(f"  {_ident(rng, 3)}: {rng.randint(1, 900)}\n" for _ in range(60))
    files = {"src/app/limits.py": limits, "conf/limits.yaml": yaml,
             "src/app/worker.py": _module(rng, "worker", "MAX_BATCH"),
             "src/app/queue.py": _module(rng, "queue", "MAX_BATCH"),
             "src/app/scheduler.py": _module(rng, "scheduler", "MAX_BATCH"),
             "src/app/api.py": _module(rng, "api", "MAX_BATCH"),
             "docs/CHANGELOG.md": _notes(rng, "Changelog", 90), "docs/DESIGN.md": _notes(rng, "Design", 90)}
    plan = (Step("grep", {"pattern": "MAX_BATCH", "path": "src"}),
            Step("read_file", {"path": "src/app/limits.py"}), Step("read_file", {"path": "src/app/worker.py"}),
            Step("read_file", {"path": "src/app/queue.py"}), Step("read_file", {"path": "src/app/scheduler.py"}),
            Step("read_file", {"path": "conf/limits.yaml"}), Step("read_file", {"path": "docs/CHANGELOG.md"}),
            Step("read_file", {"path": "src/app/api.py"}), Step("read_file", {"path": "docs/DESIGN.md"}),
            Step("edit_file", {"path": "src/app/limits.py", "old": "MAX_BATCH = {old}\n",
                               "new": "MAX_BATCH = {new}\n"}),
            Step("grep", {"pattern": "MAX_BATCH =", "path": "src"}))
    facts = (Fact(1, r"(?m)^MAX_BATCH = (?P<old>\d+)$"), Fact(5, r"(?m)^  batch_limit: (?P<new>\d+)$"))
    prompt = ("Set MAX_BATCH in src/app/limits.py to the batch_limit of conf/limits.yaml; read the "
              "modules that use it and the changelog first, and edit only that line.")
    return BuiltinTask(f"fix_constant-{seed}", prompt, files, plan, facts,
                       {"src/app/limits.py": limits.replace(f"MAX_BATCH = {old}\n", f"MAX_BATCH = {new}\n")})


def _api_log(rng: random.Random, lines: int, day: int, slow: tuple[str, int] | None = None) -> str:
    rows = [f"2026-03-0{day}T10:{i // 60:02d}:{i % 60:02d}Z INFO req={rng.getrandbits(40):010x} "
            f"route=/{rng.choice(WORDS)} status=200 latency_ms={rng.randint(5, 900)}" for i in range(lines)]
    if slow:
        rows[rng.randrange(lines)] = f"2026-03-0{day}T11:00:00Z INFO req={slow[0]} route=/export status=200 latency_ms={slow[1]}"
    return "\n".join(rows) + "\n"


def log_question(seed: int) -> BuiltinTask:
    rng = random.Random(f"log-{seed}")
    slow_id, slow_ms, slo = f"{rng.getrandbits(40):010x}", rng.randint(1200, 4000), rng.choice((800, 1000))
    files = {"logs/api.log": _api_log(rng, 150, 2, (slow_id, slow_ms)), "logs/api.log.1": _api_log(rng, 150, 1),
             "docs/runbook.md": _notes(rng, "Runbook", 80), "docs/oncall.md": _notes(rng, "On call", 80),
             "docs/dashboards.md": _notes(rng, "Dashboards", 80),
             "docs/slo.md": _notes(rng, "SLOs", 30) + f"\np99 latency target: {slo} ms\n"}
    plan = (Step("list_dir", {"path": "logs"}), Step("read_file", {"path": "logs/api.log"}),
            Step("read_file", {"path": "logs/api.log.1"}), Step("read_file", {"path": "docs/runbook.md"}),
            Step("read_file", {"path": "docs/slo.md"}), Step("grep", {"pattern": "status=5", "path": "logs"}),
            Step("read_file", {"path": "docs/oncall.md"}), Step("read_file", {"path": "docs/dashboards.md"}),
            Step("write_file", {"path": "answers/slowest.txt",
                                "content": "req={req} latency_ms={ms} slo_ms={slo}\n"}))
    facts = (Fact(1, r"req=(?P<req>[0-9a-f]{10}) route=\S+ status=\d+ latency_ms=(?P<ms>\d+)",
                  pick="max:ms", whole=True),
             Fact(4, r"p99 latency target: (?P<slo>\d+) ms"))
    prompt = ("Which request in logs/api.log (today's log, not the rotated one) was the slowest? Write "
              "answers/slowest.txt as `req=<id> latency_ms=<ms> slo_ms=<p99 target from docs/slo.md>`; "
              "read the runbook and check the logs for 5xx first.")
    return BuiltinTask(f"log_question-{seed}", prompt, files, plan, facts,
                       {"answers/slowest.txt": f"req={slow_id} latency_ms={slow_ms} slo_ms={slo}\n"})


KINDS = (collect, fix_constant, log_question)


def builtin_tasks(count: int = 6) -> list[BuiltinTask]:
    """``count`` tasks, the kinds taking turns (seed 1 of each, then seed 2, ...)."""
    return [KINDS[i % len(KINDS)](i // len(KINDS) + 1) for i in range(count)]
