"""Context Engine's one import name. ``proxy/``, ``rules/`` and ``bench/`` at the top of the
repository are its subpackages: the wheel installs them inside this folder (setup.py maps
them); in a checkout they sit beside it, and the lines below let ``context_engine.proxy``
find them there."""

from pathlib import Path as _Path

_here = _Path(__file__).resolve().parent
if not (_here / "proxy").is_dir() and (_here.parent / "proxy" / "__init__.py").is_file():
    __path__.append(str(_here.parent))
