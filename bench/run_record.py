"""What a bench's ``--json`` output records about its own run, so a table generated from
it (``bench/docs_format.py``) can say how it was made: the command line without where it
wrote (no machine paths) and without the note, the date, the 1-minute load average when
the run started (this machine is shared; timings depend on it), and the note."""

from __future__ import annotations

import json
import os
import shlex
import time
from typing import Any

from context_engine.bench.cli import without_outputs


def about(program: str, argv: list[str], note: str = "") -> dict[str, Any]:
    """``command``, ``date``, ``load`` and ``note`` of a run of ``program`` with ``argv``."""
    return {"command": shlex.join([*shlex.split(program), *without_outputs(argv, ("--json", "--note"))]),
            "date": time.strftime("%Y-%m-%d"), "load": round(os.getloadavg()[0], 2), "note": note}


def emit(report: dict[str, Any], path: str | None) -> None:
    """Print the report as JSON, and write it to ``path`` (``--json OUT``) when given."""
    text = json.dumps(report, indent=1)
    print(text)
    if path:
        with open(path, "w") as fh:
            fh.write(text + "\n")
