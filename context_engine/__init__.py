"""Context Engine's one import name. ``proxy/``, ``rules/`` and ``bench/`` at the top of the
repository are its subpackages: installed under ``context_engine``, and reachable from a
checkout through the links beside this file."""
