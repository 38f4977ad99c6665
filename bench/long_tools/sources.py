"""Read the public source data from bare git mirrors (``fetch``ed by the maintainer).

Every file is read at the mirror's HEAD with ``git show``; ``Source`` records the
repo@commit:path and licence that go into each case and ``bench/data/README.md``.
tau-bench's tool schemas are taken from the ``get_info`` dict literal of each tool
module (parsed with ``ast``, never imported or executed).
"""

from __future__ import annotations

import ast
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TAU = "sierra-research/tau-bench"
FASTAPI = "fastapi/fastapi"
COUNTRIES = "datasets/country-codes"
LICENSES = {TAU: "MIT", FASTAPI: "MIT", COUNTRIES: "ODC-PDDL-1.0"}


@dataclass(frozen=True)
class Source:
    repo: str
    commit: str
    path: str

    @property
    def license(self) -> str:
        return LICENSES[self.repo]

    def cite(self) -> str:
        return f"{self.repo}@{self.commit[:12]}:{self.path}"


@dataclass(frozen=True)
class Mirror:
    """One bare git mirror under ``--sources`` (``owner+name/repo``)."""

    repo: str
    root: Path

    @property
    def git_dir(self) -> Path:
        return self.root / self.repo.replace("/", "+") / "repo"

    def _git(self, *args: str) -> bytes:
        return subprocess.run(["git", "-C", str(self.git_dir), *args], check=True,
                              capture_output=True).stdout

    def commit(self) -> str:
        return self._git("rev-parse", "HEAD").decode().strip()

    def read(self, path: str) -> str:
        return self._git("show", f"HEAD:{path}").decode("utf-8")

    def json(self, path: str) -> Any:
        return json.loads(self.read(path))

    def files(self, folder: str) -> list[str]:
        out = self._git("ls-tree", "-r", "--name-only", "HEAD", folder).decode()
        return sorted(line for line in out.splitlines() if line)

    def source(self, path: str) -> Source:
        return Source(self.repo, self.commit(), path)


def tau_schemas(mirror: Mirror, env: str, names: list[str]) -> list[dict[str, Any]]:
    """The tool schemas of tau-bench's ``env`` tools ``names``, as its agents see them."""
    out = []
    for name in names:
        tree = ast.parse(mirror.read(f"tau_bench/envs/{env}/tools/{name}.py"))
        info = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "get_info")
        ret = next(n for n in ast.walk(info) if isinstance(n, ast.Return))
        assert ret.value is not None
        out.append(ast.literal_eval(ret.value))
    return out
