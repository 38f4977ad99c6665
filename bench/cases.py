"""Cases in the ``shared/data`` JSONL format, and the request points of a replay.

The data lives outside the repository (LoCoMo is CC BY-NC: it is read, never copied).
Its folder is ``$CONTEXT_ENGINE_DATA`` if set, else the first ``shared/data`` found beside
the repository or beside one of its ancestors (``<repo>/../shared/data`` in CI).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DATA_ENV = "CONTEXT_ENGINE_DATA"
DEV_FILES = ("agent_traces_dev.jsonl", "injections_dev.jsonl", "locomo_dev.jsonl")


@dataclass(frozen=True)
class Probe:
    question: str
    answer: str
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class Case:
    id: str
    messages: list[dict[str, Any]]
    probes: tuple[Probe, ...] = ()
    tools: list[dict[str, Any]] | None = None
    meta: dict[str, Any] = field(default_factory=dict)

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
    raise FileNotFoundError(f"no data file {name!r} (data folder: {folder})")


def default_files(folder: Path | None = None) -> list[Path]:
    folder = folder or data_dir()
    if folder is None:
        raise FileNotFoundError(f"no shared/data folder found; set {DATA_ENV}")
    return [folder / name for name in DEV_FILES if (folder / name).is_file()]


def case_from_json(obj: dict[str, Any]) -> Case:
    probes = tuple(
        Probe(str(p.get("question", "")), str(p.get("answer", "")),
              tuple(str(e) for e in p.get("evidence") or ()))
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
    every question's case: ``meta.sample_id``); ``limit`` keeps the first N.
    """
    cases: list[Case] = []
    seen: set[str] = set()
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            case = case_from_json(json.loads(line))
            key = str(case.meta.get("sample_id") or case.id)
            if dedupe and key in seen:
                continue
            seen.add(key)
            cases.append(case)
            if limit is not None and len(cases) >= limit:
                break
    return cases


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
