"""The one loader of tests/golden/: rule cases (``<rule>.yaml``) and API wire requests
(``wire/<api>_<name>.json``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

GOLDEN = Path(__file__).resolve().parent / "golden"


def rule_files() -> list[Path]:
    """Every rule's golden file; the file is named for the rule it exercises."""
    return sorted(GOLDEN.glob("*.yaml"))


def rule_cases(rule: str) -> list[dict[str, Any]]:
    """The cases of one rule: each has a ``title``, ``options``, ``input`` and ``expected``."""
    cases: list[dict[str, Any]] = yaml.safe_load((GOLDEN / f"{rule}.yaml").read_text("utf-8"))
    return cases


def wire_files() -> list[Path]:
    """The recorded client requests, one API per file-name prefix."""
    return sorted((GOLDEN / "wire").glob("*.json"))


def wire(name: str) -> bytes:
    """The exact bytes of one recorded request, by file name."""
    return (GOLDEN / "wire" / name).read_bytes()
