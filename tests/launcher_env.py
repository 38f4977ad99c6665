"""Helpers for tests that drive ``context-engine run`` as a user would: a temporary HOME
and state folder, the CLI in a subprocess, and the background proxy always stopped."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from context_engine.proxy.recording.ledger import read_rows
from tests.conftest import REPO

CLI = [sys.executable, "-m", "context_engine.proxy.cli"]
QUIET = {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
         "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1", "CLAUDE_CODE_MAX_RETRIES": "0",
         "NO_COLOR": "1"}


@dataclass
class User:
    """A user's machine in a temporary folder: HOME, the state folder, a project folder."""

    root: Path
    env: dict[str, str]

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def project(self) -> Path:
        return self.root / "project"

    @property
    def state(self) -> Path:
        return self.root / "state" / "context-engine"

    def run(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*CLI, *args], env=self.env, cwd=self.project, capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen([*CLI, *args], env=self.env, cwd=self.project, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL)

    def rows(self) -> list[dict[str, Any]]:
        """The ledger, after ``stop`` (the proxy flushes it on SIGTERM)."""
        self.run("stop", timeout=60)
        return read_rows(str(self.state / "ledger.db"))


def make_user(tmp_path: Path, **extra: str) -> Iterator[User]:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TERM", "TMPDIR")}
    user = User(tmp_path, {})
    for folder in (user.home, user.project):
        folder.mkdir(parents=True, exist_ok=True)
    user.env = {**keep, **QUIET, "HOME": str(user.home), "XDG_STATE_HOME": str(tmp_path / "state"),
                "PYTHONPATH": str(REPO), **extra}
    try:
        yield user
    finally:
        subprocess.run([*CLI, "stop"], env=user.env, capture_output=True, timeout=60)
