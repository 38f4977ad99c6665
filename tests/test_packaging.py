"""The install adds one import name, ``context_engine``; ``proxy``, ``rules`` and ``bench``
(django-rules' and proxy.py's import names) stay free."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile


def _imports(module: str) -> bool:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    with tempfile.TemporaryDirectory() as outside:  # not the checkout: its folders are not on sys.path
        done = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=outside, env=env,
                              capture_output=True, timeout=120)
    return done.returncode == 0


def test_the_install_adds_context_engine_and_no_other_top_level_name():
    assert _imports("context_engine.proxy.cli") and _imports("context_engine.rules")
    for name in ("proxy", "rules", "bench"):
        assert not _imports(name), f"import {name} works outside the checkout"
