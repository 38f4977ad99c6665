"""The error tree moved to ``proxy/errors.py`` (below every layer, so the dialects and the
engine can raise its errors). This name stays only for the modules another change is
rewriting (relay.py, usage_tap.py, recall/stream.py); import from ``proxy/errors.py``."""

from context_engine.proxy.errors import *  # noqa: F403
