"""import-linter's contracts (``[tool.importlinter]`` in pyproject.toml) over the package as
the wheel lays it out. grimp reads the files under ``context_engine/``; in a checkout
``proxy/``, ``rules/`` and ``bench/`` sit beside that folder, so they are copied into a
temporary ``context_engine/`` first. Arguments pass to ``lint-imports``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from typecheck import SUBPACKAGES

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    with tempfile.TemporaryDirectory() as tmp:
        package = Path(tmp) / "context_engine"
        shutil.copytree(ROOT / "context_engine", package, ignore=skip)
        for name in SUBPACKAGES:
            shutil.copytree(ROOT / name, package / name, ignore=skip)
        env = {**os.environ, "PYTHONPATH": tmp}
        command = ["lint-imports", "--no-cache", "--no-logo", str(ROOT / "pyproject.toml"), *argv]
        return subprocess.call(command, cwd=tmp, env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
