"""compact: compaction epochs for agent sessions (``rule.py``)."""

from context_engine.rules.compact.rule import Compact

__all__ = ["Compact"]
