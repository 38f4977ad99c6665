"""mypy over the package under its import names: ``proxy/x.py`` is checked as
``context_engine.proxy.x`` (likewise ``rules/`` and ``bench/``), the names the wheel installs
and the code imports. Plain ``mypy`` would call it ``proxy.x`` and find no
``context_engine.proxy``. Arguments pass to mypy; without files it checks pyproject's ``files``."""

from __future__ import annotations

import sys

from mypy import build
from mypy.errors import CompileError
from mypy.main import process_options

SUBPACKAGES = ("proxy", "rules", "bench")


def main(argv: list[str]) -> int:
    sources, options = process_options(argv)
    for source in sources:
        if source.module.partition(".")[0] in SUBPACKAGES:
            source.module = f"context_engine.{source.module}"
    try:
        messages = build.build(sources, options).errors
    except CompileError as exc:
        messages = exc.messages
    if messages:
        print("\n".join(messages))
    if any(": error:" in m for m in messages):
        print(f"Found errors in {len(sources)} source files", file=sys.stderr)
        return 1
    print(f"Success: no issues found in {len(sources)} source files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
