"""Cases in the ``shared/data`` JSONL format, and the request points of a replay.

The data lives outside the repository (LoCoMo is CC BY-NC: it is read, never copied).
Its folder is ``$CONTEXT_ENGINE_DATA`` if set, else the first ``shared/data`` found beside
the repository or beside one of its ancestors (``<repo>/../shared/data`` in CI).
"""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from context_engine.proxy.engine.sessions import FENCE

DATA_ENV = "CONTEXT_ENGINE_DATA"
DEV_FILES = ("agent_traces_dev.jsonl", "injections_dev.jsonl", "locomo_dev.jsonl")


@dataclass(frozen=True)
class Probe:
    question: str
    answer: str
    evidence: tuple[str, ...]
    kind: str = ""  # long agent traces: next_action | task


@dataclass(frozen=True)
class Case:
    id: str
    messages: list[dict[str, Any]]
    probes: tuple[Probe, ...] = ()
    tools: list[dict[str, Any]] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    # a replayed session's probes checked at its cut points: (messages before the cut, probes)
    cuts: tuple[tuple[int, tuple[Probe, ...]], ...] = ()

    @property
    def dataset(self) -> str:
        return str(self.meta.get("dataset", ""))


def data_dir() -> Path | None:
    """The shared data folder, or None when it cannot be found."""
    env = os.environ.get(DATA_ENV)
    if env:
        return Path(env) if Path(env).is_dir() else None
    repo = Path(__file__).resolve().parents[1]
    for base in repo.parents:
        candidate = base / "shared" / "data"
        if candidate.is_dir():
            return candidate
    return None


def resolve_file(name: str, folder: Path | None = None) -> Path:
    """A path as given, else ``<data>/<name>`` or ``<data>/<name>_dev.jsonl``."""
    path = Path(name)
    if path.is_file():
        return path
    folder = folder or data_dir()
    if folder is not None:
        for candidate in (folder / name, folder / f"{name}_dev.jsonl", folder / f"{name}.jsonl"):
            if candidate.is_file():
                return candidate
    bundled = Path(__file__).resolve().parent / "data" / f"{name}_dev.jsonl.gz"  # committed with the repo
    if bundled.is_file():
        return bundled
    raise FileNotFoundError(f"no data file {name!r} (data folder: {folder})")


def default_files(folder: Path | None = None) -> list[Path]:
    folder = folder or data_dir()
    if folder is None:
        raise FileNotFoundError(f"no shared/data folder found; set {DATA_ENV}")
    return [folder / name for name in DEV_FILES if (folder / name).is_file()]


def case_from_json(obj: dict[str, Any]) -> Case:
    probes = tuple(
        Probe(str(p.get("question", "")), str(p.get("answer", "")),
              tuple(str(e) for e in p.get("evidence") or ()), str(p.get("kind") or ""))
        for p in obj.get("probes") or ()
    )
    tools = obj.get("tools")
    return Case(
        id=str(obj["id"]),
        messages=list(obj["messages"]),
        probes=probes,
        tools=tools if isinstance(tools, list) and tools else None,
        meta=dict(obj.get("meta") or {}),
    )


def load_cases(path: Path, limit: int | None = None, dedupe: bool = False) -> list[Case]:
    """Cases of one JSONL file, in file order.

    ``dedupe`` keeps one case per conversation (LoCoMo repeats each conversation in
    every question's case: ``meta.sample_id``). A session cut at several points
    (``meta.task`` with ``meta.cut_index``: the long agent traces) keeps its longest
    history, and the probes of every cut are checked at that cut (``Case.cuts``).
    ``limit`` keeps the first N.
    """
    cases: dict[str, Case] = {}
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            case = case_from_json(json.loads(line))
            key = str(case.meta.get("sample_id") or case.id) if dedupe else case.id
            cut = case.meta.get("cut_index")
            if dedupe and case.meta.get("task") and isinstance(cut, int):
                key = "task:" + str(case.meta["task"])
                case = _with_cut(cases.get(key), case, cut)
            elif dedupe and key in cases:
                continue
            if key not in cases and limit is not None and len(cases) >= limit:
                break
            cases[key] = case
    return list(cases.values())


def _with_cut(kept: Case | None, case: Case, cut: int) -> Case:
    """One case per session: the longest history, with every cut's probes."""
    cuts = tuple(sorted((kept.cuts if kept else ()) + ((cut, case.probes),)))
    longest = case if kept is None or len(case.messages) > len(kept.messages) else kept
    return replace(longest, cuts=cuts, probes=())


def as_text_actions(case: Case) -> Case:
    """``case`` as a text-action harness sends it (mini-swe-agent, SWE-agent's text mode):
    each command is a fenced block in the assistant's reply, not a tool call (a reply
    without the block gets it, from the call's ``command`` argument or its whole
    arguments), each result a user turn, and no ``tools``. The probes do not change."""
    messages: list[dict[str, Any]] = []
    for m in case.messages:
        if m.get("role") == "assistant" and m.get("tool_calls"):
            content = m.get("content")
            text = content if isinstance(content, str) else ""
            if FENCE not in text:
                text = "\n\n".join([text] * bool(text) + [_fenced(c) for c in m["tool_calls"]])
            m = {k: v for k, v in m.items() if k != "tool_calls"} | {"content": text}
        elif m.get("role") == "tool":
            m = {"role": "user", "content": m.get("content")}
        messages.append(m)
    return replace(case, messages=messages, tools=None)


def _fenced(call: dict[str, Any]) -> str:
    arguments = str((call.get("function") or {}).get("arguments") or "")
    try:
        command = json.loads(arguments).get("command", arguments)
    except (ValueError, AttributeError):
        command = arguments
    return f"{FENCE}bash\n{command}\n{FENCE}"


def request_points(messages: list[dict[str, Any]]) -> list[int]:
    """Indices where the model must answer: a user turn, or the last of a run of tool results.

    A live agent sends ``messages[:i + 1]`` at each of these points.
    """
    points = []
    for i, m in enumerate(messages):
        role = m.get("role")
        nxt = messages[i + 1].get("role") if i + 1 < len(messages) else None
        if role == "user" or (role == "tool" and nxt != "tool"):
            points.append(i)
    return points
