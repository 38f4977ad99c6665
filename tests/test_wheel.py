"""The sdist and the wheel, built the way a user's pip builds them: the wheel (made from the
sdist, so the sdist is complete) installs into a fresh venv with every module and data file
of ``proxy/``, ``rules/`` and ``bench/``, and ``context-engine demo`` runs from it, imported
from the venv and not from this checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.conftest import REPO

FOLDERS = ("proxy", "rules", "bench")

# Run in the venv from a folder outside the checkout: where each import comes from.
PROBE = """
import json, context_engine, context_engine.proxy.cli, context_engine.rules
print(json.dumps({"init": context_engine.__file__, "path": list(context_engine.__path__),
                  "cli": context_engine.proxy.cli.__file__,
                  "rules": sorted(context_engine.rules.REGISTRY)}))
"""


def _run(args: list[str], cwd: Path, timeout: float = 300) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{args}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _tracked() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", *FOLDERS, "context_engine", "setup.py",
                              "pyproject.toml", "README.md"], cwd=REPO, capture_output=True,
                             check=True, timeout=60).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    return [name for name in out.decode().split("\0") if name]


@pytest.mark.slow
def test_wheel_built_from_the_sdist_installs_everything_and_runs_the_demo(tmp_path):
    tracked = _tracked()
    source = tmp_path / "checkout"  # a copy: a build writes egg-info and build/ where it runs
    for name in tracked:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name)
    dist = tmp_path / "dist"
    dist.mkdir()
    sdist = _run([sys.executable, "-c", "import sys; from setuptools import build_meta as b; "
                  "print(b.build_sdist(sys.argv[1]))", str(dist)], source).split()[-1]
    with tarfile.open(dist / sdist) as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    (unpacked,) = (tmp_path / "unpacked").iterdir()
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(dist),
          str(unpacked)], tmp_path)
    (wheel,) = dist.glob("context_engine-*.whl")

    venv = tmp_path / "venv"  # the system's packages for the dependencies (offline)
    _run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], tmp_path)
    python = venv / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", str(wheel)],
         tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    got = json.loads(_run([str(python), "-c", PROBE], elsewhere))
    installed = Path(got["init"]).parent
    assert installed.is_relative_to(venv) and got["path"] == [str(installed)]
    assert Path(got["cli"]).is_relative_to(installed)
    assert {"fold_duplicates", "tool_json", "zones"} <= set(got["rules"])

    inside = [name for name in tracked if name.partition("/")[0] in FOLDERS]
    missing = [name for name in inside if not (installed / name).is_file()]
    assert not missing, f"in the checkout, not in the wheel: {missing}"
    assert any(name.endswith(".html") for name in inside)  # the data files are among them
    assert any(name.endswith(".yaml") for name in inside)

    ledger = tmp_path / "demo.db"
    out = _run([str(venv / "bin" / "context-engine"), "demo", "--ledger", str(ledger),
                "--store", "memory://", "--config", os.devnull], elsewhere)
    assert "bill before and after" in out and "gpt-4o" in out and ledger.is_file()
